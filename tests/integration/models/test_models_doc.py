"""docs/models.md: its flow example runs as written against a local server, and every other
snippet at least compiles."""

from __future__ import annotations

import ast
import os
import re
import subprocess
import sys
from pathlib import Path

from fakes.model_provider import FakeProvider, openai_completion

DOC = Path(__file__).parents[3] / "docs" / "models.md"


def blocks() -> list[str]:
    return re.findall(r"```python\n(.*?)```", DOC.read_text(), re.S)


def test_the_flow_example_runs_with_a_model_from_the_environment(tmp_path: Path) -> None:
    script = tmp_path / "example.py"
    script.write_text(blocks()[0])
    with FakeProvider(openai_completion(content=" Delivery\n", model="tiny-1")) as server:
        env = {**os.environ, "UNDERWAY_MODEL": f"openai-compatible:tiny@{server.origin}/v1"}
        out = subprocess.run([sys.executable, str(script)], cwd=tmp_path, env=env,
                             capture_output=True, text=True, timeout=120)

    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "{'label': 'delivery'}"
    [sent] = server.received
    assert sent.body["model"] == "tiny"
    assert sent.body["messages"][1] == {"role": "user", "content": "My parcel never arrived."}


def test_the_flow_example_without_a_model_says_which_variable_to_set(tmp_path: Path) -> None:
    script = tmp_path / "example.py"
    script.write_text(blocks()[0])
    env = {k: v for k, v in os.environ.items() if k != "UNDERWAY_MODEL"}
    out = subprocess.run([sys.executable, str(script)], cwd=tmp_path, env=env,
                         capture_output=True, text=True, timeout=120)

    assert out.returncode != 0
    last = out.stderr.strip().splitlines()[-1]
    assert last.startswith("underway.errors.ConfigurationError: no model is configured: set "
                           "UNDERWAY_MODEL to openai:<model>"), out.stderr
    assert "TypeError" not in out.stderr


def test_every_snippet_compiles() -> None:
    for code in blocks():
        compile(code, str(DOC), "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT)
