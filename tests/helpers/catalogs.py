"""Catalog builders: catalogs of any size, written as users write them (YAML text through the real loader)."""
from __future__ import annotations

from evaljobs.catalog import Catalog, loads_catalog


def numbered_catalog(n: int, name: str, prompt: str = "[sim: say answer {i}]",
                     expect: str = "answer {i}") -> Catalog:
    lines = [f"name: {name}", "scenarios:"]
    for i in range(n):
        lines += [f"  - key: s{i:04d}", f"    prompt: {prompt.format(i=i)!r}",
                  f"    expect: {{contains: [{expect.format(i=i)!r}]}}"]
    return loads_catalog("\n".join(lines) + "\n", source=f"{name}.yaml")


def abc_catalog_yaml(name: str, *, failing: str) -> str:
    """YAML of scenarios ``a``, ``b``, ``c`` (the simulated provider says alpha, beta, gamma), each
    expecting its own word except ``failing``, which expects a word its answer lacks: 2 of 3 pass."""
    lines = [f"name: {name}", "scenarios:"]
    for key, word in (("a", "alpha"), ("b", "beta"), ("c", "gamma")):
        expected = "nothing-like-this" if key == failing else word
        lines += [
            f"  - key: {key}",
            f'    prompt: "[sim: say {word}]"',
            f"    expect: {{contains: [{expected}]}}",
        ]
    return "\n".join(lines) + "\n"
