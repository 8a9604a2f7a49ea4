"""The test-only echo engine and plain provider, registered on import: for a `servebench` command
line a test starts as a process of its own (`SERVEBENCH_PLUGINS=tests.support.plugins`)."""

from servebench.engines import register_engine
from servebench.providers import register_provider
from tests.support.echo_engine import EchoEngine
from tests.support.plain_provider import PlainProvider

register_engine(EchoEngine)
register_provider(PlainProvider)
