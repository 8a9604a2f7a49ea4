"""`servebench schema`: the campaign file's JSON Schema, or its field-by-field reference as Markdown
(docs/campaign-reference.md is that page: `servebench schema --format markdown > docs/campaign-reference.md`)."""

from __future__ import annotations

import argparse
import sys

from servebench.campaign.field_docs import schema_text
from servebench.cli.common import EXIT_OK


def add_schema_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("schema", help="print the campaign file's JSON Schema (or, --format markdown, the "
                       "field-by-field reference of docs/campaign-reference.md)")
    p.add_argument("--format", choices=["json", "markdown"], default="json",
                   help="json: a JSON Schema an editor can validate campaign files with; markdown: the "
                        "field-by-field reference (default: json)")
    p.set_defaults(func=cmd_schema)


def cmd_schema(args: argparse.Namespace) -> int:
    sys.stdout.write(schema_text(args.format))
    return EXIT_OK
