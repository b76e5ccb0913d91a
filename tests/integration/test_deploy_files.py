"""The files that deploy mcpvisor (deploy/Dockerfile, .dockerignore, deploy/k8s/) hold
what an operator relies on, and still agree with the code they deploy.

No docker and no cluster: the manifests go through the Kubernetes API schemas
`kubernetes-validate` ships (strict: an unknown field is an error), the Dockerfile through
hadolint, and the rest is read and compared with the code: the probe paths are GET from a
real ``mcpvisor serve`` started with the image's own arguments (and no token, as a kubelet
sends none), the image's HEALTHCHECK command is run against it, every environment variable
the files set is one the code or the sample config reads, the grace period covers the
drain, the sample config loads, the build context holds the sources and nothing else.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any, Final

import pytest
import trio
import yaml
from dockerfile_parse import DockerfileParser

from mcpvisor.actors.process import SHUTDOWN_GRACE_S
from mcpvisor.cli.serve import FRONT_CLOSE_S
from mcpvisor.config import parse_config, parse_duration
from tests.helpers import REAL_IO_BOUND_S, flaky, http_client, write_config
from tests.security.proxy import running_proxy

REPO: Final = Path(__file__).resolve().parents[2]
DEPLOY: Final = REPO / "deploy"
K8S: Final = DEPLOY / "k8s"
DOCKERFILE: Final = DEPLOY / "Dockerfile"
BIN: Final = Path(sys.executable).parent
"""The test extra's checkers install their commands beside the interpreter."""

KUBERNETES_VERSIONS: Final = ("1.30", "1.37")
"""The oldest Kubernetes minor still commonly run, and the newest the checker ships schemas for."""
PLACEHOLDER: Final = "REPLACE-ME"
SECRET_WORDS: Final = ("TOKEN", "KEY", "SECRET", "PASSWORD", "PASSWD", "CREDENTIAL")
CHECK_BOUND_S: Final = 60.0

pytestmark = pytest.mark.timeout(REAL_IO_BOUND_S + 60)  # the tests bound themselves; this is the backstop


# --------------------------------------------------------------------------------------
# reading the files
# --------------------------------------------------------------------------------------


@cache
def kustomization() -> dict[str, Any]:
    doc = yaml.safe_load((K8S / "kustomization.yaml").read_text())
    assert isinstance(doc, dict)
    return doc


@cache
def resources() -> tuple[tuple[str, dict[str, Any]], ...]:
    """(file, document) for every object the kustomization applies."""
    found = []
    for name in kustomization()["resources"]:
        for doc in yaml.safe_load_all((K8S / name).read_text()):
            if doc is not None:
                found.append((name, doc))
    return tuple(found)


def the(kind: str, name: str | None = None) -> dict[str, Any]:
    matches = [doc for _, doc in resources()
               if doc["kind"] == kind and (name is None or doc["metadata"]["name"] == name)]
    assert len(matches) == 1, f"expected one {kind} {name or ''} in deploy/k8s, found {len(matches)}"
    return matches[0]


def pod_spec() -> dict[str, Any]:
    spec: dict[str, Any] = the("Deployment")["spec"]["template"]["spec"]
    return spec


def container() -> dict[str, Any]:
    (only,) = pod_spec()["containers"]
    assert isinstance(only, dict)
    return only


def sample_config() -> dict[str, Any]:
    doc = json.loads(the("ConfigMap")["data"]["mcpvisor.json"])
    assert isinstance(doc, dict)
    return doc


@dataclass(frozen=True)
class Stage:
    name: str
    instructions: list[tuple[str, str]]

    def values(self, instruction: str) -> list[str]:
        return [value for kind, value in self.instructions if kind == instruction]


@cache
def stages() -> tuple[Stage, ...]:
    """The Dockerfile's build stages, each with its instructions in order."""
    found: list[Stage] = []
    for item in DockerfileParser(path=str(DOCKERFILE)).structure:
        kind, value = item["instruction"], item["value"]
        if kind == "FROM":
            found.append(Stage(value.split(" AS ")[-1].strip() if " AS " in value else value, []))
        elif kind != "COMMENT" and found:
            found[-1].instructions.append((kind, value))
    return tuple(found)


def envs(stage: Stage) -> dict[str, str]:
    """A stage's ENV names and values (``ENV A=1 B=2`` form)."""
    out: dict[str, str] = {}
    for value in stage.values("ENV"):
        for pair in shlex.split(value):
            name, _, val = pair.partition("=")
            out[name] = val
    return out


def exec_form(value: str) -> list[str]:
    words = json.loads(value)
    assert isinstance(words, list), value
    assert all(isinstance(w, str) for w in words), value
    return words


def option(args: list[str], flag: str) -> str:
    return args[args.index(flag) + 1]


def runtime() -> Stage:
    return stages()[-1]


def served_port() -> int:
    """The port the image's command serves on."""
    (cmd,) = runtime().values("CMD")
    return int(option(exec_form(cmd), "--port"))


def healthcheck_command() -> list[str]:
    (check,) = runtime().values("HEALTHCHECK")
    return exec_form(check[check.index("CMD ") + len("CMD "):])


def longest_pod_name() -> str:
    """The longest name a pod of the Deployment gets, which $MCPVISOR_REPLICA carries: the
    Deployment's name, the pod template's hash (at most 10 characters), 5 random ones."""
    return f"{the('Deployment')['metadata']['name']}-{'7' * 10}-{'x' * 5}"


def probes() -> dict[str, dict[str, Any]]:
    return {kind: container()[kind]["httpGet"] for kind in ("startupProbe", "livenessProbe", "readinessProbe")
            if kind in container()}


@cache
def package_source() -> str:
    """Every Python source of the package, as one text to look names up in."""
    return "\n".join(p.read_text(encoding="utf-8") for folder in ("supervisor", "actors")
                     for p in sorted((REPO / folder).rglob("*.py")))


def read_by_code(name: str) -> bool:
    return f'"{name}"' in package_source()


def run_checker(command: str, *args: str) -> subprocess.CompletedProcess[str]:
    path = BIN / command
    assert path.exists(), f"{path} is missing: `pip install -e '.[test]'` installs it"
    return subprocess.run([str(path), *args], capture_output=True, text=True, timeout=CHECK_BOUND_S,
                          check=False, cwd=REPO)


# --------------------------------------------------------------------------------------
# the checkers
# --------------------------------------------------------------------------------------


def test_every_file_in_deploy_k8s_is_applied() -> None:
    """A manifest missing from kustomization.yaml is never applied, whatever it says."""
    on_disk = {p.name for p in K8S.iterdir() if p.suffix in (".yaml", ".yml")} - {"kustomization.yaml"}
    assert set(kustomization()["resources"]) == on_disk
    # kustomize swaps the image by name: the Deployment's image must carry that name
    (image,) = kustomization()["images"]
    assert container()["image"].rsplit(":", 1)[0] == image["name"]


@pytest.mark.parametrize("version", KUBERNETES_VERSIONS)
def test_every_manifest_is_valid_for_kubernetes(version: str) -> None:
    files = [str(K8S / name) for name in kustomization()["resources"]]
    done = run_checker("kubernetes-validate", "--strict", "--kubernetes-version", version, *files)
    assert done.returncode == 0, done.stdout + done.stderr
    passed = re.findall(r"passed for resource (\S+)", done.stdout)
    assert len(passed) == len(resources()), done.stdout  # every object was checked, none skipped
    assert "WARN" not in done.stdout + done.stderr, done.stdout + done.stderr


def test_the_dockerfile_passes_hadolint() -> None:
    done = run_checker("hadolint", "--no-color", str(DOCKERFILE))
    assert (done.returncode, done.stdout + done.stderr) == (0, "")


# --------------------------------------------------------------------------------------
# the image
# --------------------------------------------------------------------------------------


def test_the_image_is_multi_stage_and_runs_as_a_user() -> None:
    names = [s.name for s in stages()]
    assert len(names) >= 2
    assert "build" in names
    final = runtime()
    assert any(v.startswith("--from=build ") for v in final.values("COPY")), "the runtime copies the build"
    assert not [v for v in final.values("COPY") if not v.startswith("--from=")], "no sources in the runtime"
    (user,) = final.values("USER")
    assert user.split(":")[0] not in ("root", "0")
    assert int(user.split(":")[0]) == pod_spec()["securityContext"]["runAsUser"]
    assert final.values("STOPSIGNAL") == ["SIGTERM"]
    (entrypoint,) = final.values("ENTRYPOINT")
    assert exec_form(entrypoint)[-1] == "mcpvisor"
    (cmd,) = final.values("CMD")
    args = exec_form(cmd)
    assert args[:1] == ["serve"]
    assert option(args, "--transport") == "http"
    assert option(args, "--host") == "0.0.0.0"  # reachable from outside the container
    assert final.values("EXPOSE") == [str(served_port())]


def test_the_image_installs_extras_the_package_has() -> None:
    import tomllib

    extras = set(tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["optional-dependencies"])
    (build,) = [s for s in stages() if s.name == "build"]
    asked = {e for run in build.values("RUN") for group in re.findall(r'"\.\[([^]]+)\]"', run)
             for e in group.split(",")}
    assert {"postgres", "otel"} <= asked
    assert asked <= extras, f"deploy/Dockerfile installs extras pyproject.toml lacks: {asked - extras}"


def test_the_image_runs_npx_and_uvx_servers() -> None:
    """Most stdio servers are started with npx or uvx: the image ships both, and the
    sample config's stdio servers use only what it ships."""
    (build,) = [s for s in stages() if s.name == "build"]
    shipped = set()
    if any(re.search(r'"uv==[0-9.]+"', run) for run in build.values("RUN")):
        shipped |= {"uv", "uvx"}
    if any("/usr/local/bin/npx" in run for run in runtime().values("RUN")) and any(
            v.startswith("--from=node /usr/local/bin/node ") for v in runtime().values("COPY")):
        shipped |= {"node", "npm", "npx"}
    assert {"npx", "uvx"} <= shipped
    commands = {e["command"] for e in sample_config()["mcpServers"].values() if "command" in e}
    assert commands
    assert commands <= shipped


def test_no_secret_is_baked_into_the_image() -> None:
    for stage in stages():
        for name in envs(stage):
            assert not any(word in name.upper() for word in SECRET_WORDS), f"ENV {name} in stage {stage.name}"
        for arg in stage.values("ARG"):
            assert not any(word in arg.upper() for word in SECRET_WORDS), f"ARG {arg}"


# --------------------------------------------------------------------------------------
# the manifests against the code and the image
# --------------------------------------------------------------------------------------


def test_every_variable_set_is_one_that_is_read() -> None:
    """A misspelt or renamed variable is silently ignored: the store would be the
    files, the replica unnamed, the token unset."""
    interpolated = set(re.findall(r"\$\{([A-Z0-9_]+)", the("ConfigMap")["data"]["mcpvisor.json"]))
    env = {e["name"]: e for e in container()["env"]}
    image_env = {n for n in envs(runtime()) if n.startswith("MCPVISOR_")}
    for name in [*env, *sorted(image_env)]:
        assert read_by_code(name) or name in interpolated, f"{name} is set but nothing reads it"
    assert {"MCPVISOR_REPLICA", "MCPVISOR_STORE", "MCPVISOR_STORE_KEY", "MCPVISOR_TOKEN"} <= set(env)
    assert env["MCPVISOR_REPLICA"]["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.name"
    # the Secret holds every key the pod asks for, and the secrets come from it, not from values
    secret = the("Secret")
    for name, entry in env.items():
        if any(word in name for word in SECRET_WORDS) or name == "MCPVISOR_STORE":
            ref = entry["valueFrom"]["secretKeyRef"]
            assert ref["name"] == secret["metadata"]["name"], name
            assert ref["key"] in secret["stringData"], name
    # where the pod puts the config and the state is where the image looks
    image = envs(runtime())
    for name in ("MCPVISOR_CONFIG", "MCPVISOR_STATE_DIR"):
        assert env[name]["value"] == image[name]


def test_the_secrets_are_placeholders_that_never_serve() -> None:
    from mcpvisor._serve import TokenFileError, start_tokens

    values = the("Secret")["stringData"]
    assert values
    assert all(PLACEHOLDER in v for v in values.values()), values
    with pytest.raises(TokenFileError, match="MCPVISOR_TOKEN"):  # too short: the proxy refuses to start
        start_tokens({"MCPVISOR_TOKEN": values["MCPVISOR_TOKEN"]})
    assert values["MCPVISOR_STORE"].startswith(("postgresql://", "postgres://"))


def test_the_probes_and_ports_agree_with_the_image() -> None:
    port = served_port()
    (declared,) = container()["ports"]
    assert declared["containerPort"] == port
    for kind, probe in probes().items():
        assert probe["port"] in (port, declared["name"]), kind
    assert probes()["readinessProbe"]["path"] == "/readyz"
    assert probes()["livenessProbe"]["path"] == "/healthz"
    assert f"127.0.0.1:{port}/healthz" in " ".join(healthcheck_command())
    for service in (doc for _, doc in resources() if doc["kind"] == "Service"):
        assert service["spec"]["selector"].items() <= the("Deployment")["spec"]["template"]["metadata"][
            "labels"].items(), "a Service that selects no pod has no endpoints"
        assert [p["targetPort"] for p in service["spec"]["ports"]] in ([port], [declared["name"]])


def test_the_grace_period_covers_the_drain() -> None:
    """SIGKILL comes terminationGracePeriodSeconds after the pod starts stopping: the
    preStop sleep, then SIGTERM, the drain (settings.drainTimeout), the front's close and
    the upstreams' stop (stdin closed, then SIGTERM, each bounded by the shutdown grace)."""
    settings = sample_config()["settings"]
    assert "drainTimeout" in settings, "the manifests' timing is derived from it: say it in the config"
    drain = parse_duration(settings["drainTimeout"], field="drainTimeout", max_s=3600)
    (sleep, seconds) = container()["lifecycle"]["preStop"]["exec"]["command"]
    assert sleep == "sleep"
    stop_tail = FRONT_CLOSE_S + 2 * SHUTDOWN_GRACE_S
    assert pod_spec()["terminationGracePeriodSeconds"] >= float(seconds) + drain + stop_tail


def test_replicas_survive_a_voluntary_disruption() -> None:
    deployment = the("Deployment")
    assert deployment["spec"]["replicas"] == 3
    assert deployment["spec"]["strategy"]["rollingUpdate"]["maxUnavailable"] == 0
    pdb = the("PodDisruptionBudget")["spec"]
    pod_labels = deployment["spec"]["template"]["metadata"]["labels"]
    assert pdb["selector"]["matchLabels"].items() <= pod_labels.items()
    assert 0 < pdb["maxUnavailable"] < deployment["spec"]["replicas"]


def test_the_root_filesystem_is_read_only_and_every_written_path_is_a_volume() -> None:
    security = container()["securityContext"]
    assert security["readOnlyRootFilesystem"] is True
    assert security["allowPrivilegeEscalation"] is False
    assert security["capabilities"]["drop"] == ["ALL"]
    assert pod_spec()["securityContext"]["runAsNonRoot"] is True
    mounts = {m["mountPath"]: m for m in container()["volumeMounts"]}
    volumes = {v["name"]: v for v in pod_spec()["volumes"]}
    image = envs(runtime())
    for path in (image["MCPVISOR_STATE_DIR"], image["HOME"], "/tmp"):
        assert path in mounts, f"{path} is on the read-only root filesystem"
        assert not mounts[path].get("readOnly"), f"{path} is mounted read-only"
        assert "emptyDir" in volumes[mounts[path]["name"]]
    config_dir = str(Path(image["MCPVISOR_CONFIG"]).parent)
    assert "configMap" in volumes[mounts[config_dir]["name"]]  # a directory, so edits reach the pod
    assert "subPath" not in mounts[config_dir]
    assert image["XDG_CACHE_HOME"].startswith(image["HOME"] + "/")
    assert image["npm_config_cache"].startswith(image["HOME"] + "/")


def test_the_sample_config_loads_and_accepts_the_service_names(tmp_path: Path) -> None:
    """What a client names the Service by must pass the front's Host check, else 421."""
    text = the("ConfigMap")["data"]["mcpvisor.json"]
    env = {name: "x" * 32 for name in re.findall(r"\$\{([A-Z0-9_]+)", text)}
    config = parse_config(text, path=tmp_path / "mcpvisor.json", env=env)
    servers = sample_config()["mcpServers"]
    assert {"http", "stdio"} <= {e.get("type", "stdio") for e in servers.values()}
    assert config.servers
    allowed = set(sample_config()["settings"]["allowedHosts"])
    service, namespace = "mcpvisor", kustomization()["namespace"]
    assert service in {doc["metadata"]["name"] for _, doc in resources() if doc["kind"] == "Service"}
    for name in (service, f"{service}.{namespace}", f"{service}.{namespace}.svc",
                 f"{service}.{namespace}.svc.cluster.local"):
        assert name in allowed, name


# --------------------------------------------------------------------------------------
# the build context
# --------------------------------------------------------------------------------------


def _pattern(glob: str) -> re.Pattern[str]:
    """A .dockerignore pattern as Docker reads it: ``*`` and ``?`` within one path
    segment, ``**`` across any number of them, ``[...]`` a class."""
    out, i = "", 0
    while i < len(glob):
        if glob.startswith("**/", i):
            out, i = out + "(?:.*/)?", i + 3
        elif glob.startswith("**", i):
            out, i = out + ".*", i + 2
        elif glob[i] == "[":
            end = glob.index("]", i)
            out, i = out + glob[i:end + 1], end + 1
        else:
            out, i = out + {"*": "[^/]*", "?": "[^/]"}.get(glob[i], re.escape(glob[i])), i + 1
    return re.compile(out)


def in_context(rules: list[tuple[bool, re.Pattern[str]]], path: str) -> bool:
    """Docker's rule: the last pattern that matches the path or a folder above it wins."""
    parts = path.split("/")
    prefixes = ["/".join(parts[:k]) for k in range(1, len(parts) + 1)]
    kept = True
    for negated, pattern in rules:
        if any(pattern.fullmatch(p) for p in prefixes):
            kept = negated
    return kept


def dockerignore_rules() -> list[tuple[bool, re.Pattern[str]]]:
    rules = []
    for line in (REPO / ".dockerignore").read_text().splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            negated = line.startswith("!")
            rules.append((negated, _pattern(line.removeprefix("!").strip("/"))))
    return rules


def tracked() -> Iterator[str]:
    done = subprocess.run(["git", "ls-files", "-z"], cwd=REPO, capture_output=True, timeout=CHECK_BOUND_S,
                          check=True)
    yield from (p for p in done.stdout.decode().split("\0") if p)


def test_the_build_context_holds_the_sources_and_nothing_else() -> None:
    """`docker build -f deploy/Dockerfile .` sends the repository root: the package must
    build from what gets through (its sources, pyproject.toml, the README it names), and
    the virtualenv, node_modules, caches and tests must not be sent or baked in."""
    rules = dockerignore_rules()
    files = list(tracked())
    assert files, "git ls-files listed nothing"
    for path in files:
        top = path.split("/")[0]
        wanted = top in ("supervisor", "actors", "bench", "mcpvisor", "pyproject.toml", "README.md") \
            and not path.startswith(("bench/results/", "bench/.peers/"))
        assert in_context(rules, path) == wanted, path
    for path in (".venv/bin/python", "tests/npm-servers/node_modules/x/index.js", ".git/HEAD",
                 "supervisor/__pycache__/tree.cpython-311.pyc", "actors/.mypy_cache/x.json",
                 "mcpvisor.egg-info/PKG-INFO", "bench/.peers/fastmcp/bin/python",
                 "deploy/k8s/deployment.yaml"):
        assert not in_context(rules, path), path


# --------------------------------------------------------------------------------------
# a real replica
# --------------------------------------------------------------------------------------


async def test_a_replica_serves_every_probe_without_a_token(tmp_path: Path) -> None:
    """``mcpvisor serve`` with the image's arguments (on loopback and a free port here),
    a front token set as the Secret sets it and the replica named as a pod of the
    Deployment is (a name the proxy refused would keep every pod from starting): every
    path the kubelet probes answers 200 with JSON and no Authorization header, /mcp still
    wants the token, and the image's HEALTHCHECK command succeeds against it."""
    (cmd,) = runtime().values("CMD")
    args = exec_form(cmd)[1:]
    args[args.index("--host") + 1] = "127.0.0.1"
    args[args.index("--port") + 1] = "0"
    config = write_config(tmp_path, {"flaky": flaky()})
    env: Mapping[str, str] = {"MCPVISOR_TOKEN": "t" * 40, "MCPVISOR_REPLICA": longest_pod_name(),
                              "MCPVISOR_STATE_DIR": str(tmp_path / "state")}
    paths = sorted({p["path"] for p in probes().values()} | {"/healthz"})
    with trio.fail_after(REAL_IO_BOUND_S):
        async with running_proxy(config, *args, env=env) as proxy, http_client() as http:
            base = f"http://127.0.0.1:{proxy.port}"
            for path in paths:
                answer = await http.get(base + path)
                assert answer.status_code == 200, (path, answer.text)
                assert answer.headers["content-type"].startswith("application/json"), path
                assert isinstance(answer.json(), dict), path
            assert (await http.post(f"{base}/mcp", json={})).status_code == 401
            check = [sys.executable if w == "python" else w for w in healthcheck_command()]
            check = [w.replace(f"127.0.0.1:{served_port()}", f"127.0.0.1:{proxy.port}") for w in check]
            done = await trio.run_process(check, capture_stdout=True, capture_stderr=True, check=False,
                                          env={**os.environ, **env})
            assert done.returncode == 0, done.stderr
