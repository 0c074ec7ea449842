"""``pipeline submit``'s check that the pipeline's service account may do what the run will do.

Every task of a Vertex AI run acts as the resource config's service account
(``shared_resource_config.common_compute_config.gcp_service_account_email``), so what the
submitter's own credentials may do proves nothing. This module acts *as the service account*: it
asks the IAM Credentials API for a five-minute token of it (the submitter needs Service Account
Token Creator on the account, ``roles/iam.serviceAccountTokenCreator``), then asks each resource
the run touches which of the permissions the run needs that token holds (``testIamPermissions``).
The answer is the service's own: it counts roles granted on the resource, inherited from its
project, folder or organisation, through groups, custom roles and deny policies, which no reading
of policies here could.

What is asked (:func:`needed_permissions`), each naming the config key it comes from:

- the bucket of the runs folder: ``storage.objects.create / get / list / delete`` (every stage
  writes, replaces and removes objects there); the bucket of ``gs://`` source files:
  ``storage.objects.get / list``;
- partitioning in BigQuery (``datasetConfig.partitionConfig.engine``): ``bigquery.jobs.create``
  on the jobs' project; ``bigquery.tables.getData`` on every source table; on the scratch
  dataset the table permissions of :data:`SCRATCH_TABLES` (and ``bigquery.datasets.create`` on
  the project when the dataset does not exist yet: the engine creates it);
- ``exportConfig.warehouse: bigquery``: ``bigquery.jobs.create`` on the export project and the
  table permissions of :data:`EXPORT_TABLES` on the embeddings dataset (or
  ``bigquery.datasets.create`` when it does not exist).

BigQuery has no ``testIamPermissions`` for a dataset, so a dataset's table permissions are asked
of its project; when the project does not grant them and the dataset exists, its access list is
read: an entry naming the service account with a role that grants them is enough; otherwise the
permission may still come through a group on the dataset, and the line says it could not be
confirmed instead of refusing.

A permission certainly missing is a :class:`~graphstore.config.Problem` (``pipeline submit``
exits 2, one line each: the permission, the resource, the key, the role that grants it). Where
the check cannot ask (no token: the submitter lacks Token Creator; a service that does not
answer), one line says "not checked" with the reason and the submission goes on: a missing
permission then fails the first task that needs it, naming the job (exit 1).

Requests (the exact REST calls, tested against a loopback server in tests/unit/test_service_account_checks.py):

- token: ``POST {iamcredentials}/v1/projects/-/serviceAccounts/{email}:generateAccessToken``;
- project: ``POST {cloudresourcemanager}/v3/projects/{project}:testIamPermissions``;
- table: ``POST {bigquery}/bigquery/v2/projects/{p}/datasets/{d}/tables/{t}:testIamPermissions``;
- dataset: ``GET {bigquery}/bigquery/v2/projects/{p}/datasets/{d}`` (its ``access`` list);
- bucket: ``GET {storage}/storage/v1/b/{bucket}/iam/testPermissions?permissions=...``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal
from urllib.parse import quote

from graphstore.config import Problem
from pipeline.vertex_checks import COMMAND_LINE

if TYPE_CHECKING:  # pragma: no cover
    from graphstore.config import ResourceConfig, TaskConfig

ResourceKind = Literal["project", "table", "dataset", "bucket"]

SCRATCH_TABLES = ("bigquery.tables.create", "bigquery.tables.getData",
                  "bigquery.tables.updateData", "bigquery.tables.delete", "bigquery.tables.export")
"""What the BigQuery engine does to its scratch tables: creates them (CREATE TABLE AS SELECT),
reads and exports them (EXPORT DATA), drops them."""
EXPORT_TABLES = ("bigquery.tables.create", "bigquery.tables.getData",
                 "bigquery.tables.updateData", "bigquery.tables.update", "bigquery.tables.delete")
"""What the export does to the embeddings dataset: load staging tables, MERGE into the
embedding tables, (re)create the ``_latest`` views, drop the staging tables."""
RUN_BUCKET = ("storage.objects.create", "storage.objects.get", "storage.objects.list",
              "storage.objects.delete")
SOURCE_BUCKET = ("storage.objects.get", "storage.objects.list")

ROLE_OF = {"bigquery.jobs.create": "roles/bigquery.jobUser",
           "bigquery.datasets.create": "roles/bigquery.dataEditor",
           "storage.objects.get": "roles/storage.objectViewer",
           "storage.objects.list": "roles/storage.objectViewer",
           "bigquery.tables.getData": "roles/bigquery.dataViewer"}
"""The predefined role to name for a missing permission (the others: see :func:`role_for`)."""
DATASET_WRITERS = {"WRITER", "OWNER", "roles/bigquery.dataEditor", "roles/bigquery.dataOwner",
                   "roles/bigquery.admin"}
"""Dataset access-list roles that grant every permission of :data:`SCRATCH_TABLES` and
:data:`EXPORT_TABLES`."""


def role_for(permission: str) -> str:
    if permission in ROLE_OF:
        return ROLE_OF[permission]
    return "roles/storage.objectAdmin" if permission.startswith("storage.") \
        else "roles/bigquery.dataEditor"


@dataclass(frozen=True)
class Endpoints:
    """Where the requests go (Google's services; tests point them at a loopback server)."""

    iam_credentials: str = "https://iamcredentials.googleapis.com"
    resource_manager: str = "https://cloudresourcemanager.googleapis.com"
    bigquery: str = "https://bigquery.googleapis.com"
    storage: str = "https://storage.googleapis.com"


@dataclass(frozen=True)
class Needed:
    """Permissions the run needs on one resource, and the config key that makes it need them.

    ``name``: ``project`` -> a project id; ``table`` -> ``project.dataset.table``; ``dataset`` ->
    ``project.dataset`` (asked of the project, then read from the access list: module docs);
    ``bucket`` -> a bucket name."""

    kind: ResourceKind
    name: str
    permissions: tuple[str, ...]
    key: str
    purpose: str
    flag: bool = False
    """``key`` is a command-line flag (``--run-root``), not a key of the task config."""


@dataclass(frozen=True)
class Outcome:
    """The check's answer: refusals, and lines to print (not checked / not confirmed)."""

    problems: list[Problem]
    notes: list[str]


def needed_permissions(task: "TaskConfig", res: "ResourceConfig", run_root: str) -> list[Needed]:
    """What the run needs, in the order it needs it (module docs)."""
    from graphstore.io.bigquery_source import parse
    from graphstore.io.uris import is_gcs, split_gcs
    from graphstore.partition.configured import scratch_project
    from graphstore.planning.bigquery_cost import uses_bigquery_engine
    from pipeline.bigquery_checks import source_keys

    out = [Needed("bucket", split_gcs(run_root)[0], RUN_BUCKET, "--run-root",
                  "runs folder: every stage writes there", flag=True)]
    sources = source_keys(task)
    seen = {out[0].name}
    for key, uri in sources:
        if is_gcs(uri) and split_gcs(uri)[0] not in seen:
            seen.add(split_gcs(uri)[0])
            out.append(Needed("bucket", split_gcs(uri)[0], SOURCE_BUCKET, key, "raw files"))
    if uses_bigquery_engine(task):
        project = scratch_project(task)
        out.append(Needed("project", project, ("bigquery.jobs.create",),
                          "datasetConfig.partitionConfig.bigquery.project",
                          "the BigQuery engine's jobs"))
        for key, uri in sources:
            out.append(Needed("table", ".".join(parse(uri)), ("bigquery.tables.getData",), key,
                              "the BigQuery engine reads it"))
        out.append(Needed("dataset", f"{project}.{task.dataset.partition.bigquery.dataset}",
                          SCRATCH_TABLES, "datasetConfig.partitionConfig.bigquery.dataset",
                          "the BigQuery engine's scratch tables"))
    export = task.export
    if export.warehouse == "bigquery":
        project = export.bigquery_project or res.shared.project
        if project and export.bigquery_dataset:
            key = "exportConfig.bigqueryProject"
            out.append(Needed("project", project, ("bigquery.jobs.create",), key,
                              "the export's load and query jobs"))
            out.append(Needed("dataset", f"{project}.{export.bigquery_dataset}", EXPORT_TABLES,
                              "exportConfig.bigqueryDataset", "the embedding tables"))
    return out


class AsServiceAccount:
    """Asks Google's services what ``email`` may do, with a short-lived token of it."""

    def __init__(self, email: str, source_credentials: Any, endpoints: Endpoints = Endpoints()):
        from google.auth import impersonated_credentials
        from google.auth.transport.requests import AuthorizedSession

        self.email, self.endpoints = email, endpoints
        token_url = (f"{endpoints.iam_credentials}/v1/projects/-/serviceAccounts/"
                     f"{quote(email)}:generateAccessToken")
        credentials = impersonated_credentials.Credentials(
            source_credentials=source_credentials, target_principal=email,
            target_scopes=["https://www.googleapis.com/auth/cloud-platform"], lifetime=300,
            iam_endpoint_override=token_url)
        self._session = AuthorizedSession(credentials)

    def _json(self, method: str, url: str, **kwargs) -> dict | None:
        """The response's JSON; None on 404; raises ``RuntimeError`` naming the status else."""
        response = self._session.request(method, url, timeout=30, **kwargs)
        if response.status_code == 404:
            return None
        if response.status_code != 200:
            raise RuntimeError(f"{method} {url.split('?')[0]}: HTTP {response.status_code} "
                               f"{response.text[:200]}")
        return response.json()

    def granted(self, kind: ResourceKind, name: str, permissions: tuple[str, ...]
                ) -> frozenset[str] | None:
        """Which of ``permissions`` the account holds on the resource; None when it does not
        exist. (A dataset: see :meth:`dataset_access`.)"""
        e = self.endpoints
        if kind == "project":
            got = self._json("POST", f"{e.resource_manager}/v3/projects/{quote(name)}"
                             ":testIamPermissions", json={"permissions": list(permissions)})
        elif kind == "table":
            p, d, t = name.split(".", 2)
            got = self._json("POST", f"{e.bigquery}/bigquery/v2/projects/{quote(p)}/datasets/"
                             f"{quote(d)}/tables/{quote(t)}:testIamPermissions",
                             json={"permissions": list(permissions)})
        elif kind == "bucket":
            got = self._json("GET", f"{e.storage}/storage/v1/b/{quote(name)}/iam/testPermissions",
                             params=[("permissions", p) for p in permissions])
        else:
            raise ValueError(f"granted() asks projects, tables and buckets, not {kind}")
        if got is None:
            return None
        return frozenset(got.get("permissions", ())) & frozenset(permissions)

    def dataset_access(self, name: str) -> list[dict] | None:
        """The dataset's access list (None when the dataset does not exist)."""
        p, d = name.split(".", 1)
        got = self._json("GET", f"{self.endpoints.bigquery}/bigquery/v2/projects/{quote(p)}/"
                                f"datasets/{quote(d)}")
        return None if got is None else list(got.get("access", ()))

    def names_me_as_writer(self, access: list[dict]) -> bool:
        """True when an entry of ``access`` names this account with a role of
        :data:`DATASET_WRITERS`."""
        me = {("userByEmail", self.email), ("iamMember", f"serviceAccount:{self.email}")}
        return any(entry.get("role") in DATASET_WRITERS
                   and any((k, entry.get(k)) in me for k in ("userByEmail", "iamMember"))
                   for entry in access)


def permission_problems(needed: list[Needed], account: AsServiceAccount, task_file: str
                        ) -> Outcome:
    """Asks ``account`` for each of ``needed`` (module docs); stops at the first request that
    cannot be made (the token, a service) and says so as a note."""
    problems: list[Problem] = []
    notes: list[str] = []

    def refuse(need: Needed, missing: list[str], where: str) -> None:
        roles = ", ".join(sorted({role_for(p) for p in missing}))
        problems.append(Problem(file=COMMAND_LINE if need.flag else task_file, path=need.key,
                                value=None, message=(
            f"the service account {account.email} lacks {', '.join(missing)} on {where} "
            f"({need.purpose}); grant it {roles} there (docs/vertex.md, section 2)")))

    try:
        for need in needed:
            if need.kind != "dataset":
                have = account.granted(need.kind, need.name, need.permissions)
                if have is None:  # a missing table or bucket is another check's line
                    continue
                missing = [p for p in need.permissions if p not in have]
                if missing:
                    refuse(need, missing, f"{need.kind} {need.name}")
                continue
            project = need.name.split(".", 1)[0]
            access = account.dataset_access(need.name)
            asked = need.permissions + (("bigquery.datasets.create",) if access is None else ())
            have = account.granted("project", project, asked) or frozenset()
            missing = [p for p in asked if p not in have]
            if not missing:
                continue
            if access is None:
                refuse(need, missing, f"project {project} (dataset {need.name} does not exist "
                                      "yet: the run creates it)")
            elif not account.names_me_as_writer(access):
                notes.append(f"submit: not confirmed: {account.email} may hold "
                             f"{', '.join(missing)} on dataset {need.name} ({need.key}) only "
                             "through a group; the project does not grant them and the "
                             "dataset's access list does not name the account")
    except Exception as exc:  # noqa: BLE001 - cannot ask (no token, a service down): said
        reason = f"{type(exc).__name__}: {exc}"[:300]
        notes.append(f"submit: service account permissions not checked: {reason} (acting as "
                     f"{account.email} needs roles/iam.serviceAccountTokenCreator on it)")
    return Outcome(problems, notes)
