"""The streaming example (examples/streaming/demo.py), run as a user runs it: its worker is
killed with SIGKILL mid-answer, a second worker asks the model again, the terminal shows
each word once and the answer is journaled once; with ``--serve`` the console follows the
run live, through the same crash."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import httpx

from fakes.console_browser import login_form_token

DEMO = Path(__file__).resolve().parents[3] / "examples" / "streaming" / "demo.py"
STORY = ("The lighthouse keeper wrote one line in the log every night: the lamp was lit, "
         "the sea was calm, the ships went by. On the night of the storm she wrote two.")


def env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith("UNDERWAY_CRASH")}


def test_the_demo_streams_through_a_sigkill(db: str) -> None:
    done = subprocess.run([sys.executable, str(DEMO), "--db", db], env=env(),
                          capture_output=True, text=True, timeout=300)
    out = done.stdout
    assert done.returncode == 0, out + done.stderr
    assert "worker 1 killed (SIGKILL) mid-answer" in out
    assert "[restart: attempt 2 asks the model again" in out
    # The abandoned words, then the whole story once, from the restart.
    assert out.count("The lighthouse keeper wrote one line ") == 2
    assert STORY in out and out.count(STORY) == 1
    assert "model calls counted: 1; requests the model server saw: 2" in out
    assert "OK: streamed live, never a word twice" in out


def test_the_console_follows_the_demo_through_the_kill(sqlite_url: str) -> None:
    demo = subprocess.Popen([sys.executable, str(DEMO), "--db", sqlite_url, "--serve"],
                            env=env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    try:
        assert demo.stdout is not None
        lines: list[str] = []
        while not lines or not lines[-1].startswith("waiting for the console"):
            line = demo.stdout.readline()
            assert line, "".join(lines)
            lines.append(line)
        page = re.search(r"^console: (\S+)$", "".join(lines), re.M)
        key = re.search(r"viewer key (\S+)$", "".join(lines), re.M)
        assert page and key
        origin, path = page.group(1).split("/runs/")
        frames: list[tuple[str, str, dict[str, object]]] = []
        with httpx.Client(base_url=origin, timeout=60.0) as browser:
            form = browser.get("/login")
            r = browser.post("/login", data={"token": key.group(1), "next": "/runs",
                                             "csrf": login_form_token(form.text)})
            assert r.status_code == 303
            run_page = browser.get(f"/runs/{path}").text
            assert 'id="answer"' in run_page and "/static/answer.js" in run_page
            tokens = re.search(r'data-tokens="([^"]+)"', run_page)
            assert tokens
            with browser.stream("GET", tokens.group(1).replace("&amp;", "&")) as sse:
                fields: dict[str, str] = {}
                for line in sse.iter_lines():
                    if line:
                        name, _, value = line.partition(": ")
                        fields[name] = value
                        continue
                    if "event" in fields:
                        frames.append((fields.get("id", ""), fields["event"],
                                       json.loads(fields["data"])))
                    fields = {}
        demo.send_signal(signal.SIGINT)
        out, err = demo.communicate(timeout=120)
    finally:
        if demo.poll() is None:
            demo.kill()
            demo.communicate()
    assert demo.returncode == 0, out + err
    assert "OK: streamed live" in out
    deltas = [d for _, kind, d in frames if kind == "delta"]
    assert frames[-1][1] == "end"
    offsets = [int(str(d["offset"])) for d in deltas]
    assert offsets == sorted(set(offsets))
    kinds = [d["delta"]["type"] for d in deltas]  # type: ignore[index]
    restart = kinds.index("restart")
    after = "".join(str(d["delta"]["text"]) for d in deltas[restart:]  # type: ignore[index]
                    if d["delta"]["type"] == "text")  # type: ignore[index]
    assert after == STORY and kinds[-1] == "done"
    assert 0 < restart < len(STORY.split())
