"""``pipeline submit``'s check of the service account's permissions (pipeline.service_account_checks),
through the real google-auth impersonation and sessions, against a loopback HTTP server that
answers as the IAM Credentials, Resource Manager, BigQuery and Cloud Storage APIs do (IAM cannot
run here: the server stands for it, and the tests check every request it receives)."""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs, unquote, urlsplit

import pytest
import yaml
from google.oauth2.credentials import Credentials

from graphstore.config import load_config_pair
from pipeline.vertex_checks import COMMAND_LINE
from pipeline.service_account_checks import (
    EXPORT_TABLES, RUN_BUCKET, SCRATCH_TABLES, AsServiceAccount, Endpoints, needed_permissions,
    permission_problems,
)

REPO = Path(__file__).resolve().parents[2]
SA = "graphstore-runner@my-project.iam.gserviceaccount.com"
RUN_ROOT = "gs://my-project-graphstore-perm/runs"


@dataclass
class FakeGoogle:
    """What the loopback server knows: who may act as whom, what exists, what is granted."""

    token_creators: set[str] = field(default_factory=lambda: {SA})
    grants: dict[tuple[str, str], set[str]] = field(default_factory=dict)
    tables: set[str] = field(default_factory=set)
    datasets: dict[str, list[dict]] = field(default_factory=dict)
    buckets: set[str] = field(default_factory=set)
    requests: list[tuple[str, str, dict | None, str]] = field(default_factory=list)

    def answer(self, method: str, url: str, body: dict | None, auth: str) -> tuple[int, dict]:
        parts = urlsplit(url)
        path = unquote(parts.path)
        self.requests.append((method, path, body, auth))
        if path.endswith(":generateAccessToken"):
            email = path.split("/serviceAccounts/")[1].split(":")[0]
            if auth != "Bearer submitter" or email not in self.token_creators:
                return 403, {"error": {"code": 403, "status": "PERMISSION_DENIED",
                                       "message": "iam.serviceAccounts.getAccessToken denied"}}
            expiry = datetime.now(timezone.utc) + timedelta(seconds=300)
            return 200, {"accessToken": f"token-of-{email}",
                         "expireTime": expiry.strftime("%Y-%m-%dT%H:%M:%SZ")}
        if auth != f"Bearer token-of-{SA}":
            return 401, {"error": {"code": 401, "message": "not the service account"}}
        if path.startswith("/v3/projects/") and path.endswith(":testIamPermissions"):
            return self._test(("project", path[len("/v3/projects/"):-len(":testIamPermissions")]),
                              body["permissions"])
        if path.startswith("/bigquery/v2/projects/") and path.endswith(":testIamPermissions"):
            p, _, d, _, t = path[len("/bigquery/v2/projects/"):-len(":testIamPermissions")
                                 ].split("/")
            if f"{p}.{d}.{t}" not in self.tables:
                return 404, {"error": {"code": 404}}
            return self._test(("table", f"{p}.{d}.{t}"), body["permissions"])
        if path.startswith("/bigquery/v2/projects/") and method == "GET":
            p, _, d = path[len("/bigquery/v2/projects/"):].split("/")
            if f"{p}.{d}" not in self.datasets:
                return 404, {"error": {"code": 404}}
            return 200, {"id": f"{p}:{d}", "access": self.datasets[f"{p}.{d}"]}
        if path.startswith("/storage/v1/b/") and path.endswith("/iam/testPermissions"):
            bucket = path[len("/storage/v1/b/"):-len("/iam/testPermissions")]
            if bucket not in self.buckets:
                return 404, {"error": {"code": 404}}
            return self._test(("bucket", bucket), parse_qs(parts.query)["permissions"])
        return 400, {"error": {"code": 400, "message": f"unknown {method} {path}"}}

    def _test(self, resource: tuple[str, str], asked: list[str]) -> tuple[int, dict]:
        held = sorted(set(asked) & self.grants.get(resource, set()))
        return 200, ({"permissions": held} if held else {})  # Google omits an empty list


@pytest.fixture
def google():
    fake = FakeGoogle()

    class Handler(BaseHTTPRequestHandler):
        def _reply(self, method: str) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            body = json.loads(self.rfile.read(length)) if length else None
            status, out = fake.answer(method, self.path, body, self.headers.get("Authorization"))
            data = json.dumps(out).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self):  # noqa: N802
            self._reply("GET")

        def do_POST(self):  # noqa: N802
            self._reply("POST")

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    base = f"http://127.0.0.1:{server.server_address[1]}"
    yield fake, Endpoints(iam_credentials=base, resource_manager=base, bigquery=base,
                          storage=base)
    server.shutdown()
    thread.join(timeout=10)


def _configs(tmp_path: Path):
    """The Vertex example config on two BigQuery tables, exported to BigQuery."""
    task = yaml.safe_load((REPO / "configs" / "task_homo.yaml").read_text())
    src = task["datasetConfig"]["dataSources"]
    src["nodes"][0]["uri"] = "bq://raw-project.raw.nodes"
    src["edges"][0]["uri"] = "bq://raw-project.raw.edges"
    task["datasetConfig"].pop("dataRootUri", None)
    task["datasetConfig"]["partitionConfig"]["bigquery"] = {"project": "my-project",
                                                            "dataset": "scratch"}
    task["exportConfig"] = {"warehouse": "bigquery", "bigqueryDataset": "emb"}
    (tmp_path / "task.yaml").write_text(yaml.safe_dump(task))
    return load_config_pair(str(tmp_path / "task.yaml"),
                            str(REPO / "configs" / "resource_vertex.yaml"))


def _grant_everything(fake: FakeGoogle) -> None:
    fake.buckets.add("my-project-graphstore-perm")
    fake.grants[("bucket", "my-project-graphstore-perm")] = set(RUN_BUCKET)
    fake.tables.update({"raw-project.raw.nodes", "raw-project.raw.edges"})
    for t in ("nodes", "edges"):
        fake.grants[("table", f"raw-project.raw.{t}")] = {"bigquery.tables.getData"}
    fake.datasets["my-project.emb"] = []
    fake.grants[("project", "my-project")] = {"bigquery.jobs.create", "bigquery.datasets.create",
                                              *SCRATCH_TABLES, *EXPORT_TABLES}


def _check(tmp_path, endpoints):
    task, res = _configs(tmp_path)
    account = AsServiceAccount(SA, Credentials(token="submitter"), endpoints)
    return permission_problems(needed_permissions(task, res, RUN_ROOT), account, "task.yaml")


def test_every_request_is_made_as_the_service_account_and_all_granted_passes(tmp_path, google):
    fake, endpoints = google
    _grant_everything(fake)
    outcome = _check(tmp_path, endpoints)
    assert outcome.problems == [] and outcome.notes == []
    method, path, body, auth = fake.requests[0]
    assert (method, path, auth) == (
        "POST", f"/v1/projects/-/serviceAccounts/{SA}:generateAccessToken", "Bearer submitter")
    assert body["scope"] == ["https://www.googleapis.com/auth/cloud-platform"]
    assert body["lifetime"] == "300s"
    asked = [(m, p, sorted((b or {}).get("permissions", [])))
             for m, p, b, a in fake.requests[1:]]
    assert all(a == f"Bearer token-of-{SA}" for *_, a in fake.requests[1:])
    assert asked == [
        ("GET", "/storage/v1/b/my-project-graphstore-perm/iam/testPermissions", []),
        ("POST", "/v3/projects/my-project:testIamPermissions", ["bigquery.jobs.create"]),
        ("POST", "/bigquery/v2/projects/raw-project/datasets/raw/tables/nodes:testIamPermissions",
         ["bigquery.tables.getData"]),
        ("POST", "/bigquery/v2/projects/raw-project/datasets/raw/tables/edges:testIamPermissions",
         ["bigquery.tables.getData"]),
        ("GET", "/bigquery/v2/projects/my-project/datasets/scratch", []),  # absent: created
        ("POST", "/v3/projects/my-project:testIamPermissions",
         sorted((*SCRATCH_TABLES, "bigquery.datasets.create"))),
        ("POST", "/v3/projects/my-project:testIamPermissions", ["bigquery.jobs.create"]),
        ("GET", "/bigquery/v2/projects/my-project/datasets/emb", []),  # exists: no create
        ("POST", "/v3/projects/my-project:testIamPermissions", sorted(EXPORT_TABLES)),
    ]


def test_each_missing_permission_is_one_line_naming_the_key_and_the_role(tmp_path, google):
    fake, endpoints = google
    _grant_everything(fake)
    fake.grants[("bucket", "my-project-graphstore-perm")].discard("storage.objects.delete")
    fake.grants[("table", "raw-project.raw.edges")] = set()
    fake.grants[("project", "my-project")] -= {"bigquery.jobs.create", "bigquery.datasets.create"}
    outcome = _check(tmp_path, endpoints)
    lines = [str(p) for p in outcome.problems]
    assert outcome.notes == []
    assert len(lines) == 5, lines
    assert lines[0].startswith(f"{COMMAND_LINE}: --run-root: ")
    assert "lacks storage.objects.delete on bucket my-project-graphstore-perm" in lines[0]
    assert "roles/storage.objectAdmin" in lines[0]
    assert lines[1].startswith("task.yaml: datasetConfig.partitionConfig.bigquery.project: ")
    assert "lacks bigquery.jobs.create on project my-project" in lines[1]
    assert "roles/bigquery.jobUser" in lines[1]
    assert lines[2].startswith("task.yaml: datasetConfig.dataSources.edges[0].uri: ")
    assert "lacks bigquery.tables.getData on table raw-project.raw.edges" in lines[2]
    assert "roles/bigquery.dataViewer" in lines[2]
    assert lines[3].startswith("task.yaml: datasetConfig.partitionConfig.bigquery.dataset: ")
    assert "lacks bigquery.datasets.create on project my-project (dataset my-project.scratch " \
           "does not exist yet" in lines[3]
    assert lines[4].startswith("task.yaml: exportConfig.bigqueryProject: ")


def test_a_dataset_grant_counts_and_a_group_is_said_not_refused(tmp_path, google):
    fake, endpoints = google
    _grant_everything(fake)
    fake.grants[("project", "my-project")] -= set(SCRATCH_TABLES) | set(EXPORT_TABLES)
    fake.datasets["my-project.scratch"] = [{"role": "WRITER", "userByEmail": SA}]
    fake.datasets["my-project.emb"] = [{"role": "roles/bigquery.dataEditor",
                                        "groupByEmail": "ml-runners@example.com"}]
    outcome = _check(tmp_path, endpoints)
    assert outcome.problems == []
    assert len(outcome.notes) == 1, outcome.notes
    assert outcome.notes[0].startswith(f"submit: not confirmed: {SA} may hold ")
    assert "on dataset my-project.emb (exportConfig.bigqueryDataset) only through a group" \
        in outcome.notes[0]


def test_without_token_creator_it_says_not_checked_and_refuses_nothing(tmp_path, google):
    fake, endpoints = google
    _grant_everything(fake)
    fake.token_creators.clear()
    outcome = _check(tmp_path, endpoints)
    assert outcome.problems == []
    assert len(outcome.notes) == 1
    assert outcome.notes[0].startswith("submit: service account permissions not checked: "
                                       "RefreshError")
    assert "roles/iam.serviceAccountTokenCreator" in outcome.notes[0]
    assert len(fake.requests) == 1  # the token request, and nothing asked without it
