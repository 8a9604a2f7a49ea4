"""The report's Vega bundle is made once per vl-convert version and kept in the cache directory."""

from servebench.analysis import vega_bundle as bundle_module


def test_the_bundle_is_written_to_the_cache_once_and_read_from_it_after(tmp_path, monkeypatch):
    monkeypatch.setenv("SERVEBENCH_CACHE", str(tmp_path))
    bundle_module.vega_bundle.cache_clear()
    try:
        made = bundle_module.vega_bundle()
        path = bundle_module.bundle_path()
        assert path.parent == tmp_path / "tools" and path.read_text() == made
        assert "window.vegaEmbed=" in made.replace(" ", "")  # the page's calls find it on window
        assert [p.name for p in path.parent.iterdir()] == [path.name]  # no partial file left

        path.write_text("// kept")  # a later process reads the file instead of bundling again
        bundle_module.vega_bundle.cache_clear()
        assert bundle_module.vega_bundle() == "// kept"
    finally:
        bundle_module.vega_bundle.cache_clear()
