"""servebench.logs: the end of a log for an error message, read from the file's end."""

from pathlib import Path

from servebench import logs
from servebench.logs import tail, tail_text


def test_a_missing_file_gives_one_line_saying_so(tmp_path: Path):
    assert tail(tmp_path / "missing.log") == [f"(could not read: [Errno 2] No such file or directory: "
                                              f"'{tmp_path / 'missing.log'}')"]
    assert tail_text(tmp_path / "missing.log").startswith("(could not read:")


def test_blank_lines_are_left_out_and_an_empty_log_says_so(tmp_path: Path):
    path = tmp_path / "x.log"
    path.write_text("first\n\n   \nsecond  \n\n\n")
    assert tail(path, lines=5) == ["first", "second"]
    path.write_text("\n \n")
    assert tail(path) == [] and tail_text(path) == "(empty log)"
    assert tail_text(path.with_name("absent.log"), sep=" | ") != "(empty log)"


def test_long_lines_are_cut_to_width(tmp_path: Path):
    path = tmp_path / "x.log"
    path.write_text("a" * 50 + "\n" + "b" * 10 + "\n")
    assert tail(path, lines=2, width=20) == ["a" * 20 + " ...", "b" * 10]


def test_a_large_file_is_read_from_its_end_only(tmp_path: Path, monkeypatch):
    path = tmp_path / "big.log"
    with open(path, "w") as file:
        for i in range(200_000):  # about 5 MB, past MAX_BYTES
            file.write(f"line {i:07d} of the server log\n")
    reads = []
    real_open = open

    def counting_open(*args, **kwargs):
        file = real_open(*args, **kwargs)
        real_read = file.read
        file.read = lambda size=-1: reads.append(size) or real_read(size)
        return file

    monkeypatch.setattr("builtins.open", counting_open)
    assert tail(path, lines=3) == [f"line {i:07d} of the server log" for i in (199_997, 199_998, 199_999)]
    assert sum(reads) == logs.BLOCK_BYTES and -1 not in reads


def test_kept_lines_are_looked_for_further_back_but_not_past_the_budget(tmp_path: Path):
    path = tmp_path / "daemon.log"
    filler = "x" * 99 + "\n"
    path.write_text("error: too far back\n" + filler * (logs.MAX_BYTES // 100 + 10)
                    + "error: near the end\n" + filler * 2000 + "error: the last\n" + filler)
    found = tail(path, lines=5, keep=lambda line: line.startswith("error"))
    assert found == ["error: near the end", "error: the last"]


def test_bytes_that_are_not_utf8_are_replaced(tmp_path: Path):
    path = tmp_path / "x.log"
    path.write_bytes(b"ok\n\xff\xfe broken \xc3\n" + "caf\u00e9\n".encode())
    assert tail(path) == ["ok", "\ufffd\ufffd broken \ufffd", "caf\u00e9"]


def test_a_read_from_the_middle_drops_the_partial_first_line(tmp_path: Path, monkeypatch):
    monkeypatch.setattr(logs, "BLOCK_BYTES", 16)
    path = tmp_path / "x.log"
    path.write_text("\u00e9" * 9 + "\n" + "\u00e9" * 9 + "\n" + "\u00e9" * 9 + "\n" + "last!\n")
    assert (path.stat().st_size - 16 - 38) % 2 == 1  # the first block read starts inside a character
    assert tail(path, lines=1) == ["last!"]
    assert tail(path, lines=10) == ["\u00e9" * 9] * 3 + ["last!"]


def test_one_line_longer_than_the_budget_still_shows_its_end(tmp_path: Path, monkeypatch):
    monkeypatch.setattr(logs, "MAX_BYTES", 64)
    monkeypatch.setattr(logs, "BLOCK_BYTES", 32)
    path = tmp_path / "x.log"
    path.write_text("start\n" + "y" * 500)
    assert tail(path, lines=2, width=10) == ["y" * 10 + " ..."]
