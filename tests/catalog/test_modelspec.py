"""Model specs, the providers config (built-ins, overrides, ${ENV}, no secrets) and cost."""
from __future__ import annotations

import textwrap

import pytest

from evaljobs.catalog.modelspec import (ModelSpec,
                                        ModelSpecError,
                                        ProviderConfig,
                                        ProvidersConfig,
                                        load_providers,
                                        parse_model_spec)


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch):
    monkeypatch.delenv("EVALJOBS_PROVIDERS", raising=False)
    monkeypatch.delenv("EVALJOBS_SIM_URL", raising=False)


def write(tmp_path, text: str, name: str = "providers.yaml") -> str:
    path = tmp_path / name
    path.write_text(textwrap.dedent(text), encoding="utf-8")
    return str(path)


# --------------------------------------------------------------------------- parse_model_spec


@pytest.mark.parametrize("text, provider, model, label", [
    ("openai/gpt-4o-mini", "openai", "gpt-4o-mini", None),
    ("sim/fast@baseline", "sim", "fast", "baseline"),
    ("vllm/meta-llama/Llama-3-8B", "vllm", "meta-llama/Llama-3-8B", None),
    ("vllm/meta-llama/Llama-3-8B@candidate", "vllm", "meta-llama/Llama-3-8B", "candidate"),
    ("anthropic/claude@2024@v2", "anthropic", "claude@2024", "v2"),  # label starts at the LAST '@'
    ("gpt-4o", "openai", "gpt-4o", None),
    ("o1", "openai", "o1", None),
    ("o3-mini", "openai", "o3-mini", None),
    ("o4-mini@cheap", "openai", "o4-mini", "cheap"),
    ("claude-3-5-haiku-latest", "anthropic", "claude-3-5-haiku-latest", None),
    ("llama3:8b", "ollama", "llama3:8b", None),
    ("qwen2.5:0.5b@tiny", "ollama", "qwen2.5:0.5b", "tiny"),
])
def test_parse_and_infer(text, provider, model, label):
    spec = parse_model_spec(text)
    assert spec == ModelSpec(provider, model, label)


def test_spec_and_display_strings():
    plain = parse_model_spec("vllm/meta-llama/Llama-3-8B")
    assert plain.spec == "vllm/meta-llama/Llama-3-8B" == plain.display == str(plain)
    labelled = parse_model_spec("gpt-4o-mini@base")
    assert labelled.spec == "openai/gpt-4o-mini@base"
    assert labelled.display == "base"
    # The canonical spec round-trips: it is what identifies the model in results.
    assert parse_model_spec(labelled.spec) == labelled


@pytest.mark.parametrize("text, fragment", [
    ("", "empty model spec"),
    ("openai/", "empty model name"),
    ("/gpt-4o", "empty provider"),
    ("openai/gpt-4o@", "empty label"),
    ("@label", "empty model name"),
    ("open ai/gpt-4o", "contains whitespace"),
    (" openai/gpt-4o", "contains whitespace"),
    ("openai/gpt-4o\n", "contains whitespace"),
    ("mistral-large", "cannot tell the provider of model spec 'mistral-large'"),
    ("llama3:", "cannot tell the provider"),
    ("bad!prov/x", "provider 'bad!prov' must match"),
])
def test_bad_specs_are_one_line_errors(text, fragment):
    with pytest.raises(ModelSpecError) as info:
        parse_model_spec(text)
    message = str(info.value)
    assert fragment in message
    assert "\n" not in message
    assert isinstance(info.value, ValueError)


def test_bare_name_error_says_how_to_fix():
    with pytest.raises(ModelSpecError, match=r"write it as provider/model \(e\.g\. vllm/mistral-large"):
        parse_model_spec("mistral-large")


def test_non_string_spec():
    with pytest.raises(ModelSpecError, match="must be a string"):
        parse_model_spec(None)  # type: ignore[arg-type]


def test_unknown_provider_with_config():
    providers = load_providers()
    assert parse_model_spec("sim/judge", providers).provider == "sim"
    with pytest.raises(ModelSpecError) as info:
        parse_model_spec("acme/model-1", providers)
    message = str(info.value)
    assert "unknown provider 'acme'" in message
    assert (
        "known: anthropic, azure, deepseek, fireworks, gemini, groq, mistral, ollama, openai, openrouter, "
        "sim, together, vllm"
    ) in message
    assert "--providers FILE" in message
    # Without a config, any syntactically valid provider is accepted.
    assert parse_model_spec("acme/model-1").provider == "acme"


# --------------------------------------------------------------------------- providers config


def _io(price):
    """A price's (input, output) per million tokens (the presets carry cache prices too)."""
    return (price.input, price.output)


def test_builtins():
    config = load_providers()
    assert config.source == "<built-in>"
    assert set(config.names) == {"openai", "anthropic", "azure", "gemini", "openrouter", "groq", "together",
                                 "deepseek", "mistral", "fireworks", "ollama", "vllm", "sim"}
    openai = config.get("openai")
    assert openai.base_url == "https://api.openai.com/v1"
    assert openai.api_key_env == "OPENAI_API_KEY"
    assert _io(openai.price("gpt-4o-mini")) == (0.15, 0.60)
    assert _io(openai.price("gpt-4o")) == (2.50, 10.00)
    assert openai.price("some-unknown-model") is None
    assert openai.api == "openai" and openai.stream is True and openai.checked
    anthropic = config.get("anthropic")
    assert anthropic.base_url == "https://api.anthropic.com/v1"
    assert anthropic.api_key_env == "ANTHROPIC_API_KEY"
    assert anthropic.api == "anthropic"
    assert config.get("azure").api == "azure" and config.get("azure").api_version
    # Every preset with a key variable says when its prices were checked.
    assert all(config.get(name).checked for name in config.names)
    assert config.get("ollama").base_url == "http://127.0.0.1:11434/v1"
    assert config.get("ollama").api_key_env is None
    assert config.get("vllm").base_url == "http://127.0.0.1:8000/v1"
    sim = config.get("sim")
    assert sim.base_url is None  # start the simulated provider in-process
    assert _io(sim.price("anything")) == (1.0, 2.0)


def test_sim_url_from_env_is_read_at_call_time(monkeypatch):
    from evaljobs.providers.endpoints import base_url_for

    config = load_providers()
    monkeypatch.setenv("EVALJOBS_SIM_URL", "http://127.0.0.1:9999/v1")
    assert config.get("sim").base_url is None  # not baked into a cached config
    assert base_url_for(config, "sim") == "http://127.0.0.1:9999/v1"


def test_get_unknown_provider_names_known_ones():
    with pytest.raises(ModelSpecError) as info:
        load_providers().get("acme")
    message = str(info.value)
    assert message.startswith(
        "unknown provider 'acme' (known: anthropic, azure, deepseek, fireworks, "
        "gemini, groq, mistral, ollama, openai, openrouter, sim, together, vllm)"
    )
    assert "--providers FILE" in message and "\n" not in message


def test_cost_computation():
    provider = ProviderConfig(name="p", base_url="http://x", prices={
        "big": (3.0, 15.0), "big-*": (2.0, 10.0), "big-mini-*": (0.5, 1.0), "*": (1.0, 1.0)})
    assert provider.cost("big", 1_000_000, 0) == pytest.approx(3.0)
    assert provider.cost("big", 2000, 1000) == pytest.approx(0.006 + 0.015)
    # Exact first, then the most specific pattern, then "*".
    assert _io(provider.price("big-2024")) == (2.0, 10.0)
    assert _io(provider.price("big-mini-2024")) == (0.5, 1.0)
    assert _io(provider.price("other")) == (1.0, 1.0)
    # No price known: the cost is unknown (None), never $0 — except for a call that used no tokens.
    assert ProviderConfig(name="q", base_url=None).price("m") is None
    assert ProviderConfig(name="q", base_url=None).cost("m", 10**6, 10**6) is None
    assert ProviderConfig(name="q", base_url=None).cost("m", 0, 0) == 0.0
    assert load_providers().get("openai").cost("gpt-unreleased", 10, 10) is None
    # Dated snapshots of built-in models are priced.
    assert _io(load_providers().get("openai").price("gpt-4o-mini-2024-07-18")) == (0.15, 0.60)
    assert load_providers().get("sim").cost("x", 500_000, 250_000) == pytest.approx(1.0)


def test_file_overrides_and_extends(tmp_path, monkeypatch):
    monkeypatch.setenv("PROXY_HOST", "proxy.internal:4000")
    monkeypatch.setenv("TEAM_TOKEN", "t0k")
    path = write(tmp_path, """
        providers:
          openai:
            base_url: http://${PROXY_HOST}/v1
            prices: {gpt-4o-mini: [0.2, 0.8], my-fine-tune: [1, 2]}
            timeout: 30
          litellm:
            base_url: http://127.0.0.1:4000/v1
            api_key_env: LITELLM_KEY
            max_retries: 2
            headers: {X-Team: "${TEAM_TOKEN}"}
            governor: {initial: 4, ceiling: 32, rpm: 600}
            prices: {"*": [0.5, 1.5]}
    """)
    config = load_providers(path)
    assert config.source == path
    openai = config.get("openai")
    assert openai.base_url == "http://proxy.internal:4000/v1"
    assert openai.api_key_env == "OPENAI_API_KEY"  # kept from the built-in
    assert openai.timeout == 30.0
    assert _io(openai.price("gpt-4o-mini")) == (0.2, 0.8)  # overridden
    assert _io(openai.price("gpt-4o")) == (2.50, 10.00)  # kept
    assert _io(openai.price("my-fine-tune")) == (1.0, 2.0)  # added
    litellm = config.get("litellm")
    assert litellm == ProviderConfig(
        name="litellm", base_url="http://127.0.0.1:4000/v1", api_key_env="LITELLM_KEY",
        prices={"*": (0.5, 1.5)}, timeout=60.0, max_retries=2,
        governor={"initial": 4, "ceiling": 32, "rpm": 600}, headers={"X-Team": "t0k"}, origin=str(path))
    assert "sim" in config and "vllm" in config  # built-ins still there
    assert parse_model_spec("litellm/gpt-4o", config).provider == "litellm"


def test_providers_file_from_env(tmp_path, monkeypatch):
    path = write(tmp_path, "providers:\n  lab: {base_url: http://10.0.0.5:8000/v1}\n")
    monkeypatch.setenv("EVALJOBS_PROVIDERS", path)
    assert load_providers().get("lab").base_url == "http://10.0.0.5:8000/v1"
    # An explicit path wins over the environment.
    other = write(tmp_path, "providers:\n  lab2: {base_url: http://h/v1}\n", name="other.yaml")
    assert "lab" not in load_providers(other) and "lab2" in load_providers(other)


def test_api_key_is_read_from_the_named_env_var(monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    assert load_providers().get("openai").api_key == "sk-test"
    assert load_providers().get("ollama").api_key is None


def test_empty_providers_file_means_builtins(tmp_path):
    assert load_providers(write(tmp_path, "# nothing yet\n")).names == load_providers().names


@pytest.mark.parametrize("text, fragment", [
    ("providers:\n  openai:\n    api_key: sk-secret\n",
     "provider 'openai': 'api_key' is not allowed (never put secrets in this file); set 'api_key_env'"),
    ("providers:\n  lab: {api_key_env: LAB_KEY}\n", "provider 'lab': missing 'base_url'"),
    ("providers:\n  lab: {base_url: 'http://${NOPE_NOT_SET}/v1'}\n",
     "provider 'lab': base_url uses ${NOPE_NOT_SET} but the environment variable 'NOPE_NOT_SET' is not set"),
    ("providers:\n  lab: {base_url: http://h/v1, timeout: soon}\n",
     "provider 'lab': timeout must be a positive number of seconds, not 'soon'"),
    ("providers:\n  lab: {base_url: http://h/v1, prices: {m: [1]}}\n",
     "provider 'lab': price for 'm' must be [input, output] USD per million tokens"),
    ("providers:\n  lab: {base_url: http://h/v1, prices: [1, 2]}\n",
     "provider 'lab': prices must map model -> [input, output] USD per million tokens"),
    ("providers:\n  lab: {base_url: http://h/v1, batch_prices: 3}\n",
     "provider 'lab': batch_prices must map model -> [input, output] USD per million tokens"),
    ("providers:\n  lab: {base_url: http://h/v1, batch_prices: {m: [1, -2]}}\n",
     "provider 'lab': price for 'm' must be [input, output] USD per million tokens"),
    ("providers:\n  lab: {base_url: http://h/v1, max_retries: -1}\n",
     "provider 'lab': max_retries=-1 must be a whole number at least 0 and at most 1000"),
    ("providers:\n  lab: {base_url: http://h/v1, max_retries: 2.5}\n",
     "provider 'lab': max_retries=2.5 must be a whole number at least 0 and at most 1000"),
    ("providers:\n  lab: {base_url: http://h/v1, api_key_env: 'sk-abc def'}\n",
     "provider 'lab': api_key_env must be an environment variable name"),
    ("providers:\n  lab: {base_url: http://h/v1, timout: 5}\n",
     "provider 'lab': unknown key 'timout' (did you mean 'timeout'?)"),
    ("providers:\n  lab: {base_url: http://h/v1, headers: {X-N: 5}}\n",
     "provider 'lab': headers must map header name -> string value"),
    ("providers:\n  lab: {base_url: http://h/v1, governor: [1]}\n",
     "provider 'lab': governor must be a mapping"),
    ("providers:\n  my/lab: {base_url: http://h/v1}\n", "provider name 'my/lab' must match"),
    ("providers: [openai]\n", "'providers' must be a mapping of name -> settings"),
    ("provider:\n  lab: {}\n", "unknown top-level key 'provider'"),
    ("- just a list\n", "expected a mapping with a 'providers' key"),
])
def test_bad_providers_files(tmp_path, text, fragment):
    path = write(tmp_path, text)
    with pytest.raises(ModelSpecError) as info:
        load_providers(path)
    message = str(info.value)
    assert message.startswith(f"{path}: ")
    assert fragment in message
    assert "\n" not in message


def test_api_key_value_is_never_echoed(tmp_path):
    path = write(tmp_path, "providers:\n  openai: {api_key: sk-live-SECRET123}\n")
    with pytest.raises(ModelSpecError) as info:
        load_providers(path)
    assert "SECRET123" not in str(info.value)


def test_yaml_syntax_error_names_line(tmp_path):
    path = write(tmp_path, "providers:\n  lab: {base_url: [unclosed\n")
    with pytest.raises(ModelSpecError, match=rf"^{path}:\d+: YAML syntax error"):
        load_providers(path)


def test_missing_file(tmp_path):
    with pytest.raises(ModelSpecError, match="cannot read providers file"):
        load_providers(str(tmp_path / "nope.yaml"))


def test_providers_config_is_usable_directly():
    config = ProvidersConfig(providers={"x": ProviderConfig(name="x", base_url="http://x/v1")}, source="t")
    assert config.get("x").timeout == 60.0
    assert config.names == ("x",)
