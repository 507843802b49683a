"""scripts/bench-describe's page: its figures, the date and the machine, and the conclusion the
figures support (a release whose argument definitions import without torch changes it)."""

from __future__ import annotations

from tests.conftest import ROOT, load_module


def bench():
    return load_module(ROOT / "scripts" / "bench-describe", "bench_describe")


ROW = {"release": "0.11.2", "without_torch": "no: ImportError: No module named 'torch' (hidden)",
       "build_s": 78.1, "size_gb": 4.0, "describe_s": 9.5, "options": 200}


def test_the_page_holds_each_release_s_figures_the_date_and_the_machine(tmp_path, monkeypatch):
    module = bench()
    monkeypatch.setattr(module, "DOC", tmp_path / "describe.md")
    monkeypatch.setattr(module, "ROOT", tmp_path)
    module.write_doc([ROW, {**ROW, "release": "0.16.0", "describe_s": 7.0}], None, [0.5, 1.5])
    page = (tmp_path / "describe.md").read_text()
    assert "| 0.11.2 | no: ImportError: No module named 'torch' (hidden) | 78.1 | 4.0 | 9.5 | 200 |" in page
    assert "| 0.16.0 |" in page and "Measured 20" in page and "load average (1 min) 0.5 at start and 1.5" in page
    assert "No release's argument definitions import without torch" in page
    assert "A first describe" not in page


def test_a_release_that_imports_without_torch_and_a_cold_build_change_the_page(tmp_path, monkeypatch):
    module = bench()
    monkeypatch.setattr(module, "DOC", tmp_path / "describe.md")
    monkeypatch.setattr(module, "ROOT", tmp_path)
    module.write_doc([{**ROW, "without_torch": "yes"}], {"release": "0.11.2", "first_describe_s": 140.0,
                                                          "cache_gb": 4.1}, [0.1, 0.1])
    page = (tmp_path / "describe.md").read_text()
    assert "No release's argument definitions" not in page and "could be the wheel alone" in page
    assert "A first describe of 0.11.2 into an empty cache (every download from PyPI): 140.0 s, 4.1 GB." in page
