"""Fakes and helpers shared by test suites of more than one kind (importable as ``fakes``:
``tests/`` is on ``sys.path`` because ``tests/conftest.py`` sits in a folder that is not a
package).

- :mod:`fakes.outside_service` — the one fake outside service of the crash and chaos
  suites; :mod:`fakes.invariants` — the invariant checks they share;
- :mod:`fakes.model_provider` — a local server speaking the model providers' wire formats;
- :mod:`fakes.agent_wire` — that server playing an agent's model by the conversation;
- :mod:`fakes.host_site` — a web site on the host, for what a sandbox may reach;
- :mod:`fakes.served` — the threaded local HTTP server those three are made on;
- :mod:`fakes.receivers` — an HTTP endpoint and an SMTP sink that record the notices
  delivered to them;
- :mod:`fakes.guard_helpers` — an approvals-enabled engine and signing helpers;
- :mod:`fakes.docker_image` — which Docker image the sandbox tests run in.
- :mod:`fakes.serving` — ``underway serve`` in its own process, ready once ``/healthz``
  answers;
- :mod:`fakes.otlp_receiver` — a real OTLP/HTTP trace receiver that decodes and keeps
  every span posted to it.
"""
