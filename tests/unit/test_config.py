"""``underway.toml``: read and checked (every error names the file, the key and the
problem, and the command exits 2 before anything starts), relative paths resolved against
the file, and what it describes built: notifiers, tenant budgets, policy, tracing."""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import json
import re
import resource
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.trace.export import ConsoleSpanExporter
from typer.testing import CliRunner

from fakes.receivers import Endpoint, SmtpSink
from underway.cli import app as cli
from underway.config import Config, ConfigError, load_config
from underway.errors import SecretRefused
from underway.guard.approvals.notify import (
    ApprovalNotice,
    MultiNotifier,
    SmtpNotifier,
    WebhookNotifier,
)
from underway.guard.budgets import Budget, TenantBudgets
from underway.sandbox import WorkerLimits, configure_worker
from underway.secrets import EnvSecrets

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "underway.toml"
POLICY = 'version = "p1"\n[[rules]]\nid = "all"\noutcome = "allow"\ntools = ["*"]\n'
NOTICE = ApprovalNotice(tenant_id="acme", run_id="run-1", request_id="req-1", tool="refund",
                        args={"amount": 10}, required_role="finance")


def write(folder: Path, text: str, name: str = "underway.toml") -> Path:
    path = folder / name
    path.write_text(text, encoding="utf-8")
    return path


def problem(folder: Path, text: str) -> ConfigError:
    with pytest.raises(ConfigError) as caught:
        load_config(write(folder, text))
    return caught.value


# -- the example and the docs ---------------------------------------------------------------


def test_the_shipped_example_loads_and_builds() -> None:
    config = load_config(EXAMPLE)
    assert config.worker.app == "collections_agent.app:app"
    assert config.policy is not None
    assert config.policy.file == EXAMPLE.parent / "collections_agent" / "policy.toml"
    assert config.database == f"sqlite:///{EXAMPLE.parent}/underway.db"
    notifier = config.make_notifier({"UNDERWAY_WEBHOOK_SECRET": "s",
                                     "UNDERWAY_SMTP_PASSWORD": "p"})
    assert isinstance(notifier, MultiNotifier)
    assert [type(n) for n in notifier.notifiers] == [WebhookNotifier, SmtpNotifier]
    budgets = config.make_tenant_budget()
    assert budgets is not None and budgets.for_tenant("internal") == Budget()
    policy = config.make_policy()
    assert policy is not None and policy.version == "collections-2024-06-01"
    assert config.approvals.signed_resolutions


def test_the_docs_show_the_example_as_it_is() -> None:
    page = (ROOT / "docs" / "configuration.md").read_text(encoding="utf-8")
    blocks = re.findall(r"```toml\n(.*?)```", page, re.S)
    assert blocks[0] == EXAMPLE.read_text(encoding="utf-8")


def test_no_file_means_the_defaults() -> None:
    config = Config()
    assert (config.source, config.folder, config.database) == (None, None, None)
    assert (config.worker.concurrency, config.serve.port) == (10, 8420)
    assert config.serve.max_body_bytes == 1024 * 1024
    assert config.make_notifier({}) is None and config.make_tenant_budget() is None
    assert config.make_policy() is None and config.make_span_exporter() is None


# -- errors name the file, the key and the problem ------------------------------------------


def test_an_unknown_key_is_named_with_its_path_and_a_suggestion(tmp_path: Path) -> None:
    err = problem(tmp_path, '[notifier.webhook]\nurl = "http://x/h"\nsecret = "plain"\n')
    assert (err.key, err.source) == ("notifier.webhook.secret", str(tmp_path / "underway.toml"))
    assert str(err).endswith(
        "underway.toml: notifier.webhook.secret: unknown key (did you mean 'secret_env'?)")
    err = problem(tmp_path, "[wrker]\n")
    assert err.key == "wrker" and "did you mean 'worker'" in err.problem
    err = problem(tmp_path, "[budgets.tenants.acme]\nzzz = 1\n")
    assert err.key == "budgets.tenants.acme.zzz" and "known keys: tokens, cost_usd" in str(err)


@pytest.mark.parametrize(("text", "key", "says"), [
    ('[worker]\nconcurrency = "10"\n', "worker.concurrency",
     "must be an integer, not a string '10'"),
    ("[worker]\nconcurrency = 0\n", "worker.concurrency", "greater than or equal to 1"),
    ('[worker]\nqueues = []\n', "worker.queues", "must not be empty"),
    ("[serve]\nport = 70000\n", "serve.port", "less than or equal to 65535, not 70000"),
    ("[serve]\nmax_body_bytes = 0\n", "serve.max_body_bytes", "greater than or equal to 1"),
    ("worker = 3\n", "worker", "must be a table, not an integer"),
    ('[notifier.webhook]\nurl = "ftp://hooks"\n', "notifier.webhook.url",
     "'ftp://hooks' is not an http:// or https:// URL"),
    ("[notifier.webhook]\ntimeout = 5\n", "notifier.webhook.url", "missing"),
    ('[notifier.smtp]\nhost = "m"\nsender = "a@b.c"\nrecipients = {"*" = ["nobody"]}\n',
     'notifier.smtp.recipients."*"[0]', "'nobody' is not an e-mail address"),
    ('[notifier.smtp]\nhost = "m"\nsender = "a@b.c"\nrecipients = {ops = ["o@b.c"]}\n'
     'username = "bot"\n', "notifier.smtp", "username and password_env together"),
    ('[approvals]\nsigned_resolutions = "yes"\n', "approvals.signed_resolutions",
     "must be true or false"),
    ('[budgets.default]\non_exceed = "explode"\n', "budgets.default.on_exceed",
     "must be 'escalate' or 'fail', not 'explode'"),
    ("[budgets.default]\nmessages = -1\n", "budgets.default.messages", "0"),
    ('[telemetry]\nexporter = "zipkin"\n', "telemetry.exporter", "'otlp' or 'console'"),
    ('[telemetry]\nexporter = "console"\nendpoint = "http://c:4318"\n', "telemetry",
     'endpoint is for exporter = "otlp"'),
    ('[policy]\nfile = "nowhere.toml"\n', "policy.file", "no such file"),
    ('[anchoring]\nevery = 60\nkey = "missing.pem"\nlog = "a.jsonl"\n', "anchoring.key",
     "no such file"),
])
def test_a_bad_value_is_named_by_its_key(tmp_path: Path, text: str, key: str,
                                          says: str) -> None:
    err = problem(tmp_path, text)
    assert err.key == key and says in err.problem, str(err)
    assert str(err).startswith(f"{tmp_path / 'underway.toml'}: {key}: ")


def test_every_problem_of_the_file_is_told_at_once(tmp_path: Path) -> None:
    err = problem(tmp_path, '[worker]\nconcurency = 3\n[serve]\nport = "80"\n')
    assert "worker.concurency: unknown key" in str(err)
    assert "serve.port: must be an integer" in str(err)


def test_a_missing_or_malformed_file_is_named(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"nope\.toml: no such file"):
        load_config(tmp_path / "nope.toml")
    with pytest.raises(ConfigError, match=r"underway\.toml: not valid TOML: .*line 2"):
        load_config(write(tmp_path, "[worker]\nconcurrency = \n"))


def test_an_unset_secret_variable_is_named_when_the_notifier_is_made(tmp_path: Path) -> None:
    config = load_config(write(tmp_path, (
        '[notifier.webhook]\nurl = "http://127.0.0.1:9/h"\nsecret_env = "UW_HOOK_SECRET"\n'
        '[notifier.smtp]\nhost = "m"\nsender = "u@x.test"\nrecipients = {"*" = ["o@x.test"]}'
        '\nusername = "bot"\npassword_env = "UW_SMTP_PASSWORD"\n')))
    with pytest.raises(ConfigError) as caught:
        config.make_notifier({})
    assert str(caught.value) == (f"{tmp_path / 'underway.toml'}: notifier.webhook.secret_env: "
                                 "the environment variable UW_HOOK_SECRET is not set")
    with pytest.raises(ConfigError, match=r"notifier\.smtp\.password_env: the environment "
                       "variable UW_SMTP_PASSWORD is empty"):
        config.make_notifier({"UW_HOOK_SECRET": "s", "UW_SMTP_PASSWORD": ""})


def test_the_console_session_secret_comes_from_its_variable(tmp_path: Path) -> None:
    assert load_config(write(tmp_path, "[serve]\n")).session_secret({}) is None
    config = load_config(write(tmp_path, '[serve]\nsession_secret_env = "UW_SESSION"\n'))
    assert config.session_secret({"UW_SESSION": "s" * 32}) == b"s" * 32
    with pytest.raises(ConfigError, match=r"serve\.session_secret_env: the environment "
                       "variable UW_SESSION is not set"):
        config.session_secret({})
    with pytest.raises(ConfigError, match=r"serve\.session_secret_env: .* holds 8 "
                       "characters; a session secret needs at least 32"):
        config.session_secret({"UW_SESSION": "tooshort"})


# -- paths, builders ------------------------------------------------------------------------


def test_relative_paths_start_at_the_files_directory(tmp_path: Path) -> None:
    (tmp_path / "etc").mkdir()
    write(tmp_path / "etc", POLICY, "policy.toml")
    config = load_config(write(tmp_path / "etc", (
        'database = "sqlite:///data/u.db"\n[policy]\nfile = "policy.toml"\n'
        '[anchoring]\nevery = 1\nkey = "policy.toml"\nlog = "anchors.jsonl"\n')))
    assert config.folder == tmp_path / "etc"
    assert config.database == f"sqlite:///{tmp_path}/etc/data/u.db"
    assert config.policy is not None and config.policy.file == tmp_path / "etc" / "policy.toml"
    assert config.anchoring is not None and config.anchoring.log == tmp_path / "etc/anchors.jsonl"
    absolute = load_config(write(tmp_path, 'database = "sqlite:////var/u.db"\n'))
    assert absolute.database == "sqlite:////var/u.db"
    other = load_config(write(tmp_path, 'database = "postgresql://u@h/db"\n'))
    assert other.database == "postgresql://u@h/db"


def test_tenant_budgets_are_a_default_and_each_tenants_own(tmp_path: Path) -> None:
    config = load_config(write(tmp_path, (
        '[budgets.default]\nmessages = 3\non_exceed = "fail"\n'
        '[budgets.tenants.vip]\nmessages = 30\nmoney = { INR = 100, USD = inf }\n')))
    assert config.make_tenant_budget() == TenantBudgets(
        default=Budget(messages=3, on_exceed="fail"),
        tenants={"vip": Budget(messages=30, money={"INR": 100.0, "USD": float("inf")})})


@pytest.fixture
def endpoint() -> Iterator[Endpoint]:
    e = Endpoint()
    yield e
    e.close()


@pytest.fixture
def sink() -> Iterator[SmtpSink]:
    s = SmtpSink()
    yield s
    s.close()


def test_the_notifiers_deliver_with_their_secrets_from_the_environment(
    tmp_path: Path, endpoint: Endpoint, sink: SmtpSink,
) -> None:
    config = load_config(write(tmp_path, (
        f'[notifier.webhook]\nurl = "{endpoint.url}"\nsecret_env = "UW_HOOK_SECRET"\n'
        f'[notifier.smtp]\nhost = "127.0.0.1"\nport = {sink.port}\nsender = "uw@x.test"\n'
        'username = "bot"\npassword_env = "UW_SMTP_PASSWORD"\n'
        '[notifier.smtp.recipients]\nfinance = ["cfo@x.test"]\n"*" = ["audit@x.test"]\n')))
    notifier = config.make_notifier({"UW_HOOK_SECRET": "s3cret", "UW_SMTP_PASSWORD": "pw"})
    assert notifier is not None
    asyncio.run(notifier.notify(NOTICE))
    [(headers, body)] = endpoint.received
    assert headers["X-Underway-Signature"] == hmac.new(b"s3cret", body,
                                                       hashlib.sha256).hexdigest()
    assert json.loads(body)["run_id"] == "run-1"
    [(_, rcpts, _)] = sink.messages
    assert rcpts == ["cfo@x.test", "audit@x.test"] and sink.logins == [("bot", "pw")]


def test_traces_go_to_the_exporter_the_file_names(tmp_path: Path) -> None:
    config = load_config(write(tmp_path, (
        '[telemetry]\ntraces = true\nexporter = "otlp"\nendpoint = "http://127.0.0.1:9"\n'
        'service_name = "billing"\n')))
    exporter = config.make_span_exporter()
    assert isinstance(exporter, OTLPSpanExporter)
    assert exporter._endpoint == "http://127.0.0.1:9/v1/traces"
    exporter.shutdown()
    console = load_config(write(tmp_path, '[telemetry]\ntraces = true\nexporter = "console"\n'))
    assert isinstance(console.make_span_exporter(), ConsoleSpanExporter)
    # Traces on with no exporter named: OTLP, to where OTEL_EXPORTER_OTLP_* say.
    plain = load_config(write(tmp_path, '[telemetry]\ntraces = true\n'))
    assert isinstance(plain.make_span_exporter(), OTLPSpanExporter)
    off = load_config(write(tmp_path, '[telemetry]\ntraces = false\nexporter = "console"\n'))
    assert off.make_span_exporter() is None


def test_a_missing_exporter_package_is_named_with_what_to_install(tmp_path: Path) -> None:
    """Run where the OTLP/HTTP exporter cannot be imported (as without the otel extra)."""
    path = write(tmp_path, '[telemetry]\ntraces = true\nexporter = "otlp"\n')
    probe = (
        "import sys\n"
        "sys.modules['opentelemetry.exporter.otlp.proto.http'] = None\n"
        "from underway.config import load_config, ConfigError\n"
        "try:\n"
        f"    load_config({str(path)!r}).make_span_exporter()\n"
        "except ConfigError as exc:\n"
        "    print(exc)\n"
    )
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                         check=True).stdout
    assert "underway.toml: telemetry.exporter: traces over OTLP/HTTP needs the otel extra" in out
    assert "pip install 'underway[otel]'" in out


def test_serve_never_loads_the_otel_sdk(tmp_path: Path) -> None:
    path = write(tmp_path, '[telemetry]\ntraces = true\nexporter = "otlp"\n')
    probe = (
        "import sys, underway.cli.serve\n"
        "from underway.config import load_config\n"
        f"load_config({str(path)!r})\n"
        "assert not [m for m in sys.modules if m.startswith('opentelemetry.sdk')]\n"
    )
    subprocess.run([sys.executable, "-c", probe], check=True)


# -- the commands ---------------------------------------------------------------------------


def test_a_bad_file_stops_the_worker_and_the_server_with_status_2(tmp_path: Path) -> None:
    bad = write(tmp_path, "[worker]\nconcurency = 3\n")
    for command in (["worker"], ["serve"]):
        out = CliRunner().invoke(cli, [*command, "--config", str(bad), "--db", "memory://"])
        assert out.exit_code == 2, out.output
        assert f"error: {bad}: worker.concurency: unknown key" in out.output
    out = CliRunner().invoke(cli, ["worker", "--config", str(tmp_path / "no.toml")])
    assert out.exit_code == 2 and "no.toml: no such file" in out.output


def test_an_unset_secret_stops_the_worker_before_it_opens_the_database(tmp_path: Path) -> None:
    config = write(tmp_path, '[worker]\napp = "nowhere:app"\n[notifier.webhook]\n'
                   'url = "http://127.0.0.1:9/h"\nsecret_env = "UW_UNSET_SECRET_FOR_TEST"\n')
    out = CliRunner().invoke(cli, ["worker", "--config", str(config),
                                   "--db", f"sqlite:///{tmp_path}/absent.db"])
    assert out.exit_code == 2
    assert "notifier.webhook.secret_env: the environment variable " \
        "UW_UNSET_SECRET_FOR_TEST is not set" in out.output
    assert not (tmp_path / "absent.db").exists()


def test_underway_toml_in_the_current_directory_is_read_and_said(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.chdir(tmp_path)
    write(tmp_path, "[worker]\nconcurrency = 2\n")
    out = CliRunner().invoke(cli, ["worker", "--db", "memory://"])
    assert out.exit_code == 2
    assert "underway worker: reading underway.toml" in out.output
    assert "no app given: pass --app module:attribute or set worker.app" in out.output


def test_secrets_are_bound_to_the_environments_that_may_read_them(tmp_path: Path) -> None:
    config = load_config(write(tmp_path, (
        '[secrets]\ndefault = "dev"\n'
        '[secrets.environments]\nERP_TOKEN = "prod"\nPSP_KEY = ["dev", "staging"]\n')))
    environ = {"APP_ERP_TOKEN": "prod-t0ken", "APP_PSP_KEY": "k", "APP_OTHER": "o"}
    dev = config.make_secrets(environment="dev", env_prefix="APP_", environ=environ)
    assert dev is not None and dev.get("PSP_KEY") == "k" and dev.get("OTHER") == "o"
    with pytest.raises(SecretRefused, match="secret 'ERP_TOKEN' belongs to environment prod"):
        dev.get("ERP_TOKEN")
    prod = config.make_secrets(environment="prod", env_prefix="APP_", environ=environ)
    assert prod is not None and prod.get("ERP_TOKEN") == "prod-t0ken"
    with pytest.raises(SecretRefused, match="belongs to environment dev"):
        prod.get("OTHER")
    # Without [secrets], a prefix alone is a plain provider, and nothing at all is none.
    plain = load_config(write(tmp_path, "[worker]\n"))
    assert plain.make_secrets(environment="dev", env_prefix=None) is None
    assert isinstance(plain.make_secrets(environment="dev", env_prefix="APP_"), EnvSecrets)
    with pytest.raises(ConfigError, match=r"secrets\.environments\.ERP_TOKEN"):
        load_config(write(tmp_path, "[secrets.environments]\nERP_TOKEN = 3\n"))


def test_the_sandbox_table_gives_the_workers_limits(tmp_path: Path) -> None:
    assert Config().sandbox is None
    config = load_config(write(tmp_path, "[sandbox]\ncalls = 3\negress_connections = 40\n"))
    assert config.sandbox is not None
    assert config.sandbox.limits() == {"calls": 3, "egress_connections": 40}
    example = load_config(EXAMPLE).sandbox
    assert example is not None and WorkerLimits(**example.limits()) == WorkerLimits()
    err = problem(tmp_path, "[sandbox]\ncalls = 0\n")
    assert err.key == "sandbox.calls" and "greater than or equal to 1" in err.problem
    err = problem(tmp_path, "[sandbox]\nconections = 4\n")
    assert "sandbox.conections: unknown key (did you mean 'egress_connections'?)" in str(err)


def test_the_worker_takes_its_sandbox_limits_from_the_file(tmp_path: Path) -> None:
    name = f"probe_{tmp_path.name.replace('-', '_')}"
    (tmp_path / f"{name}.py").write_text(
        "from underway.sandbox._budget import worker_budget\n"
        "seen = worker_budget().limits\n", encoding="utf-8")
    config = write(tmp_path, f'[worker]\napp = "{name}:absent"\n'
                   "[sandbox]\ncalls = 3\nresolver_threads = 2\n")
    try:
        out = CliRunner().invoke(cli, ["worker", "--config", str(config), "--db", "memory://"])
        assert out.exit_code == 2 and "absent" in out.output, out.output
        assert sys.modules[name].seen == WorkerLimits(calls=3, resolver_threads=2)
    finally:
        configure_worker(WorkerLimits())
        sys.modules.pop(name, None)
    too_many = write(tmp_path, "[worker]\napp = \"x:y\"\n[sandbox]\negress_connections = "
                     f"{resource.getrlimit(resource.RLIMIT_NOFILE)[0]}\n", "many.toml")
    out = CliRunner().invoke(cli, ["worker", "--config", str(too_many), "--db", "memory://"])
    assert out.exit_code == 2 and f"{too_many}: sandbox: " in out.output, out.output
