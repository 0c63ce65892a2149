"""The docs' "Testing a host with evaljobs.testing" example (docs/hosts.md) is the host's real test file."""
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_the_readme_shows_the_example_host_tests_verbatim():
    readme = ROOT.joinpath("docs", "hosts.md").read_text()  # moved from the README
    section = readme.split("## Testing a host with `evaljobs.testing`", 1)[1].split("\n## ", 1)[0]
    shown = section.split("```python\n", 1)[1].split("```", 1)[0]
    test_file = ROOT.joinpath("examples/host_adapter/tests/test_acme_with_evaljobs_testing.py").read_text()
    assert shown.strip() in test_file
    for name in ("test_the_adapter_answers", "test_the_context_provider_carries"):
        body = test_file.split(f"def {name}", 1)[1].split("\n\n\n", 1)[0]
        assert body.count("\n") < 30, f"{name} is over 30 lines"
