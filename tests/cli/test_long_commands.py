"""Long work shows progress: stages with a ticking clock, convert of a large file, recover, db upgrade, bench
cells."""
from __future__ import annotations

import io
import json
import threading


from evaljobs.cli._stages import stage
from evaljobs.cli.catalog import LARGE_CATALOG


class Watched(io.StringIO):
    """A terminal stand-in that tells when the ticking clock has written."""

    def __init__(self) -> None:
        super().__init__()
        self.ticked = threading.Event()

    def write(self, text: str) -> int:
        if text.startswith("\r") and " s" in text and "done" not in text:
            self.ticked.set()
        return super().write(text)


def test_a_stage_ticks_on_a_terminal_and_says_how_long_it_took() -> None:
    out = Watched()
    with stage("work: doing a thing", stream=out, tty=True):
        assert out.ticked.wait(30), "the clock never ticked"
    text = out.getvalue()
    assert text.startswith("work: doing a thing…") and text.endswith("s\n")
    assert "\rwork: doing a thing… done in" in text


def test_a_stage_in_a_log_is_one_line() -> None:
    out = io.StringIO()
    with stage("work: quiet", stream=out, tty=False):
        pass
    assert out.getvalue().count("\n") == 1 and out.getvalue().startswith("work: quiet… done in ")
    failing = io.StringIO()
    try:
        with stage("work: breaks", stream=failing, tty=False):
            raise RuntimeError("boom")
    except RuntimeError:
        pass
    assert "work: breaks… stopped after" in failing.getvalue()


def test_convert_of_a_large_file_reports_its_stages(cli, tmp_path) -> None:
    samples = tmp_path / "big.jsonl"
    samples.write_text("".join(json.dumps({"input": f"question {i}", "ideal": f"answer {i}"}) + "\n"
                               for i in range(LARGE_CATALOG)), encoding="utf-8")
    result = cli("catalog", "convert", str(samples), "--grader", "includes", "-o", str(tmp_path / "big.yaml"))
    assert result.exit_code == 0, result.output
    assert f"convert: checking {LARGE_CATALOG} scenarios from jsonl… done in" in result.stderr
    assert f"convert: writing {LARGE_CATALOG} scenarios as YAML… done in" in result.stderr
    to_stdout = cli("catalog", "convert", str(samples), "--grader", "includes")
    assert to_stdout.exit_code == 0 and "convert:" not in to_stdout.stdout  # stdout stays the YAML
    small = tmp_path / "small.jsonl"
    small.write_text(json.dumps({"input": "q", "ideal": "a"}) + "\n", encoding="utf-8")
    quiet = cli("catalog", "convert", str(small), "--grader", "match", "-o", str(tmp_path / "small.yaml"))
    assert quiet.exit_code == 0 and "convert:" not in quiet.output


def test_recover_and_db_upgrade_say_what_they_are_doing(cli, tmp_path) -> None:
    url = f"sqlite:///{tmp_path}/long.db"
    upgraded = cli("db", "upgrade", "--db", url)
    assert upgraded.exit_code == 0 and f"db upgrade: {url}… done in" in upgraded.stderr, upgraded.output
    recovered = cli("recover", "--db", url, "--broker", "memory")
    assert recovered.exit_code == 0, recovered.output
    assert "recover: checking 0 runs" in recovered.stderr and "nothing to recover" in recovered.stdout
    as_json = cli("recover", "--db", url, "--broker", "memory", "--json")
    assert as_json.exit_code == 0 and json.loads(as_json.stdout) == {"actions": [], "runs": []}, (
        as_json.output
    )


def test_db_upgrade_names_a_postgres_database_without_its_password(cli, tmp_path) -> None:
    """The stage line names the database; a password in its URL is masked (the URL need not answer)."""
    url = "postgresql://evaljobs:hunter2-secret@127.0.0.1:1/evaljobs"
    done = cli("db", "upgrade", "--db", url)
    assert done.exit_code != 0
    assert "db upgrade: postgresql://evaljobs:" in done.stderr and "hunter2-secret" not in done.output
