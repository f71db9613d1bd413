//! The migration Job examples (`examples/jobs/`): each is accepted by the real kube-apiserver
//! (also as a Pod under the `restricted` Pod Security profile), its exact command line, read from
//! the YAML, migrates a real PostgreSQL with the files laid out as the pod would mount them, and
//! two such Jobs starting together with a Brighter application never migrate a table twice.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use boxtable_operator::ident::QualifiedName;
use boxtable_operator::lock::LockIdentity;
use boxtable_operator::migrate::history::{self, HistoryTable};
use boxtable_operator::migrate::shape::fresh_statements;
use boxtable_operator::migrate::{BoxKind, HistoryScope, Payload};
use serde_json::{Value, json};
use tokio_postgres::Client;

use crate::support;
use crate::support::Sql;
use crate::support::control_plane::{control_plane, root};
use crate::support::process::printed;

/// The workload examples and where their migrate container is.
const WORKLOADS: &[(&str, &str)] = &[
    (
        "argocd-presync-job.yaml",
        "/spec/template/spec/containers/0",
    ),
    ("helm-hook-job.yaml", "/spec/template/spec/containers/0"),
    (
        "init-container-deployment.yaml",
        "/spec/template/spec/initContainers/0",
    ),
];

fn jobs_dir() -> PathBuf {
    root().join("examples/jobs")
}

/// The YAML documents of an example file, as JSON values.
fn documents(path: &Path) -> Vec<Value> {
    let text = std::fs::read_to_string(path).unwrap();
    text.split("\n---")
        .filter(|doc| {
            doc.lines()
                .any(|l| !l.trim().is_empty() && !l.starts_with('#'))
        })
        .map(|doc| serde_saphyr::from_str::<Value>(doc).unwrap())
        .collect()
}

fn document(file: &str) -> Value {
    let mut docs = documents(&jobs_dir().join(file));
    assert_eq!(docs.len(), 1, "{file} holds one object");
    docs.remove(0)
}

/// The pod spec of a workload example.
fn pod_spec(workload: &Value) -> &Value {
    workload.pointer("/spec/template/spec").unwrap()
}

/// Writes the files the pod of `workload` would see at its migrate container's mount paths into
/// `dir` (a mount path `/etc/x` becomes `dir/etc/x`): the ConfigMap's keys, and the Secret's item
/// holding `connection_string`. Returns the container's arguments with every path under a mount
/// rewritten the same way.
fn lay_out_mounts(
    workload: &Value,
    container: &str,
    dir: &Path,
    connection_string: &str,
) -> Vec<String> {
    let container = workload.pointer(container).unwrap();
    let configmap = document("00-boxtables-configmap.yaml");
    let volumes = pod_spec(workload)["volumes"].as_array().unwrap();
    let mut mounts = Vec::new();
    for mount in container["volumeMounts"].as_array().unwrap() {
        let path = mount["mountPath"].as_str().unwrap().to_owned();
        let at = dir.join(path.trim_start_matches('/'));
        std::fs::create_dir_all(&at).unwrap();
        let volume = volumes.iter().find(|v| v["name"] == mount["name"]).unwrap();
        if let Some(cm) = volume.get("configMap") {
            assert_eq!(cm["name"], configmap["metadata"]["name"]);
            for (key, value) in configmap["data"].as_object().unwrap() {
                std::fs::write(at.join(key), value.as_str().unwrap()).unwrap();
            }
        } else if let Some(secret) = volume.get("secret") {
            assert_eq!(secret["secretName"], json!("shop-db"));
            for item in secret["items"].as_array().unwrap() {
                assert_eq!(item["key"], json!("connectionString"));
                std::fs::write(
                    at.join(item["path"].as_str().unwrap()),
                    format!("{connection_string}\n"),
                )
                .unwrap();
            }
        } else {
            panic!("unexpected volume {volume}");
        }
        mounts.push((path, at));
    }
    assert!(
        container.get("command").is_none(),
        "the image's entrypoint runs"
    );
    container["args"]
        .as_array()
        .unwrap()
        .iter()
        .map(|arg| {
            let arg = arg.as_str().unwrap();
            mounts
                .iter()
                .find_map(|(path, at)| {
                    arg.strip_prefix(path.as_str())
                        .map(|rest| format!("{}{rest}", at.display()))
                })
                .unwrap_or_else(|| arg.to_owned())
        })
        .collect()
}

fn operator(args: &[String]) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_boxtable-operator"));
    cmd.args(args)
        .env_remove("DATABASE_URL")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    cmd
}

#[test]
fn each_example_is_accepted_by_the_real_server_and_its_pods_meet_the_restricted_profile() {
    let plane = control_plane();
    let ns = plane.create_namespace("jobs-examples");
    plane
        .kubectl_admin(
            &[
                "label",
                "namespace",
                &ns,
                "pod-security.kubernetes.io/enforce=restricted",
                "pod-security.kubernetes.io/warn=restricted",
            ],
            None,
        )
        .unwrap();
    let mut files: Vec<PathBuf> = std::fs::read_dir(jobs_dir())
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "yaml"))
        .collect();
    files.sort();
    files.insert(0, root().join("examples/01-secret.yaml"));
    assert_eq!(files.len(), 5, "{files:?}");
    for file in &files {
        let text = std::fs::read_to_string(file)
            .unwrap()
            .replace("namespace: shop", &format!("namespace: {ns}"));
        let out = plane.kubectl_as(&plane.admin_kubeconfig, &["create", "-f", "-"], Some(&text));
        assert!(
            out.status.success(),
            "{}: {}",
            file.display(),
            printed(&out)
        );
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!stderr.contains("Warning"), "{}: {stderr}", file.display());
    }
    for (file, container) in WORKLOADS {
        let workload = document(file);
        let c = workload.pointer(container).unwrap();
        assert_eq!(
            c["securityContext"]["readOnlyRootFilesystem"],
            json!(true),
            "{file}"
        );
        assert_eq!(
            pod_spec(&workload)["securityContext"]["runAsNonRoot"],
            json!(true),
            "{file}"
        );
        // The pod the workload makes, enforced (not only warned about) by Pod Security admission.
        let pod = json!({
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "probe", "namespace": ns},
            "spec": pod_spec(&workload),
        });
        let out = plane.kubectl_as(
            &plane.admin_kubeconfig,
            &["create", "--dry-run=server", "-f", "-"],
            Some(&pod.to_string()),
        );
        assert!(out.status.success(), "{file}: {}", printed(&out));
        // And a root-filesystem-writable, privilege-escalating copy is refused there.
        let mut loose = pod.clone();
        let spec = loose.pointer_mut("/spec").unwrap();
        spec["securityContext"]["runAsNonRoot"] = json!(false);
        let out = plane.kubectl_as(
            &plane.admin_kubeconfig,
            &["create", "--dry-run=server", "-f", "-"],
            Some(&loose.to_string()),
        );
        assert!(
            !out.status.success(),
            "{file}: the namespace enforces the profile"
        );
    }
}

async fn tables(client: &Client) -> Vec<(String, i32, String)> {
    client
        .triples(
            "SELECT \"BoxTableName\"::text, \"MigrationVersion\", \"Description\"::text \
               FROM public.\"__BrighterMigrationHistory\" ORDER BY 1, 2",
            &[],
        )
        .await
}

fn fresh_history() -> Vec<(String, i32, String)> {
    vec![
        ("inbox".to_owned(), 2, "fresh install at V2".to_owned()),
        ("outbox".to_owned(), 8, "fresh install at V8".to_owned()),
    ]
}

#[tokio::test]
async fn each_examples_command_line_migrates_with_the_files_mounted_as_in_the_pod() {
    for (file, container) in WORKLOADS {
        let db = support::fresh_db().await;
        let dir = tempfile::tempdir().unwrap();
        let args = lay_out_mounts(&document(file), container, dir.path(), &db.url);

        let out = operator(&args).output().unwrap();

        assert!(out.status.success(), "{file} {args:?}: {}", printed(&out));
        let text = printed(&out);
        assert!(
            !text.contains(&db.url),
            "the connection string is never printed"
        );
        assert!(
            text.contains("shop/orders-outbox") && text.contains("Migrated"),
            "{text}"
        );
        assert_eq!(tables(&db.connect().await).await, fresh_history(), "{file}");
        // Run again (the next sync or rollout): nothing to do, still exit 0.
        let again = operator(&args).output().unwrap();
        assert!(again.status.success(), "{}", printed(&again));
        assert!(printed(&again).contains("UpToDate"), "{}", printed(&again));
    }
}

/// Records every DDL command that creates or alters an object, in the transaction that runs it
/// (so a rolled-back command leaves no row): which command, on what.
const DDL_LOG: &str = "
CREATE TABLE public.ddl_log (tag text, identity text);
CREATE FUNCTION public.log_ddl() RETURNS event_trigger LANGUAGE plpgsql AS $$
BEGIN
  INSERT INTO public.ddl_log SELECT command_tag, object_identity FROM pg_event_trigger_ddl_commands()
    WHERE object_identity NOT LIKE 'public.ddl_log%';
END $$;
CREATE EVENT TRIGGER log_ddl ON ddl_command_end EXECUTE FUNCTION public.log_ddl();";

/// A Brighter application starting up: it takes the migration lock as Brighter does (polling
/// `pg_try_advisory_lock`), then in one transaction creates the history table if missing and the
/// outbox if neither the table nor its history exists, with its history row; commits; unlocks.
/// Its transaction stays open `hold` after the DDL (a migration takes a while; the DDL's locks are
/// held until the commit). Returns whether it created the table.
async fn brighter_application_start(client: &Client, hold: Duration) -> bool {
    let table = QualifiedName::parse(Some("public"), "outbox").unwrap();
    let key = LockIdentity::for_table(&table).key();
    let mut delays = [100u64, 200, 400, 800]
        .into_iter()
        .chain(std::iter::repeat(1000));
    let started = std::time::Instant::now();
    while !client
        .value::<bool>("SELECT pg_try_advisory_lock($1)", &[&key])
        .await
    {
        assert!(
            started.elapsed() < Duration::from_secs(120),
            "the lock was never free"
        );
        tokio::time::sleep(Duration::from_millis(delays.next().unwrap())).await;
    }
    let history = HistoryTable::for_table(&table, HistoryScope::Global);
    client.batch("BEGIN; SAVEPOINT history").await;
    // Another table's migration may be creating the history table at the same moment.
    if client.batch_execute(&history.create_sql()).await.is_err() {
        client.batch("ROLLBACK TO SAVEPOINT history").await;
    }
    let row = client
        .query_one(
            "SELECT to_regclass('public.outbox') IS NOT NULL, (SELECT count(*) FROM public.\"__BrighterMigrationHistory\" \
              WHERE \"SchemaName\" = 'public' AND \"BoxTableName\" = 'outbox')",
            &[],
        )
        .await
        .unwrap();
    let (exists, rows): (bool, i64) = (row.get(0), row.get(1));
    let create = !exists && rows == 0;
    if create {
        for sql in fresh_statements(BoxKind::Outbox, Payload::Text, &table, 8) {
            client.batch(&sql).await;
        }
        client
            .execute(
                "INSERT INTO public.\"__BrighterMigrationHistory\" (\"MigrationVersion\", \"SchemaName\", \
                 \"BoxTableName\", \"Description\") VALUES ($1, $2, $3, $4)",
                &[&8i32, &"public", &"outbox", &history::fresh_description(8)],
            )
            .await
            .unwrap();
    }
    tokio::time::sleep(hold).await;
    client.batch("COMMIT").await;
    let released: bool = client.value("SELECT pg_advisory_unlock($1)", &[&key]).await;
    assert!(released);
    create
}

/// When the application starts, relative to the Jobs.
#[derive(Clone, Copy)]
enum JobMoment {
    /// Right after the Jobs' processes started.
    Started,
    /// Once a Job's session is connected (or a Job has already created the table).
    Connected,
    /// Once a Job holds an advisory lock (or has already created the table).
    Locked,
}

async fn wait_for_a_job(client: &Client, moment: JobMoment) {
    let sql = match moment {
        JobMoment::Started => return,
        // A Job may connect, migrate and exit between two polls on a loaded machine: having
        // created the table counts as having got that far.
        JobMoment::Connected => {
            "SELECT EXISTS (SELECT 1 FROM pg_stat_activity WHERE datname = current_database() \
               AND application_name = 'boxtable-operator-migrate') \
                OR to_regclass('public.outbox') IS NOT NULL"
        }
        JobMoment::Locked => {
            "SELECT EXISTS (SELECT 1 FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid \
               WHERE l.locktype = 'advisory' AND a.datname = current_database() \
                 AND a.application_name = 'boxtable-operator-migrate') \
                OR to_regclass('public.outbox') IS NOT NULL"
        }
    };
    let started = std::time::Instant::now();
    while !client.value::<bool>(sql, &[]).await {
        assert!(
            started.elapsed() < Duration::from_secs(120),
            "no Job got that far"
        );
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_jobs_and_an_application_starting_together_migrate_each_table_once() {
    const ROUNDS: usize = 12;
    let argocd = document("argocd-presync-job.yaml");
    let helm = document("helm-hook-job.yaml");
    let mut application_created = 0;
    let mut jobs_created = 0;
    for round in 0..ROUNDS {
        let (db, client) = support::fresh_db_and_client().await;
        client.batch(DDL_LOG).await;
        let app = db.connect().await;
        let (a, b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        let first = lay_out_mounts(&argocd, WORKLOADS[0].1, a.path(), &db.url);
        let second = lay_out_mounts(&helm, WORKLOADS[1].1, b.path(), &db.url);

        // Start all three together, the application at a different moment of the Jobs' run
        // from round to round: at once, as soon as a Job's session has connected (a race for
        // the lock), or once a Job holds the lock (it arrives while a Job migrates); and in
        // some rounds its own transaction stays open a while, so the Jobs arrive while it
        // migrates.
        let jobs = [
            operator(&first).spawn().unwrap(),
            operator(&second).spawn().unwrap(),
        ];
        let moment = [JobMoment::Started, JobMoment::Connected, JobMoment::Locked][round % 3];
        wait_for_a_job(&client, moment).await;
        let hold = Duration::from_millis((round as u64 / 3 % 2) * 150);
        let created = brighter_application_start(&app, hold).await;
        application_created += usize::from(created);
        for job in jobs {
            let out = tokio::task::spawn_blocking(move || job.wait_with_output().unwrap())
                .await
                .unwrap();
            assert!(out.status.success(), "round {round}: {}", printed(&out));
            jobs_created += usize::from(
                printed(&out)
                    .lines()
                    .any(|l| l.contains("orders-outbox") && l.contains("Migrated")),
            );
        }

        assert_eq!(tables(&client).await, fresh_history(), "round {round}");
        let creates: Vec<(String, String)> = client
            .query(
                "SELECT tag, identity FROM public.ddl_log WHERE identity IN ('public.outbox', 'public.inbox', \
                 'public.idx_outbox_causationid') ORDER BY 2, 1",
                &[],
            )
            .await
            .unwrap()
            .into_iter()
            .map(|r| (r.get(0), r.get(1)))
            .collect();
        assert_eq!(
            creates,
            [
                (
                    "CREATE INDEX".to_owned(),
                    "public.idx_outbox_causationid".to_owned()
                ),
                ("CREATE TABLE".to_owned(), "public.inbox".to_owned()),
                ("CREATE TABLE".to_owned(), "public.outbox".to_owned()),
            ],
            "round {round}: each table's DDL ran once"
        );
    }
    eprintln!(
        "the outbox was created by the application in {application_created} and by a Job in \
         {jobs_created} of {ROUNDS} rounds"
    );
    assert_eq!(
        application_created + jobs_created,
        ROUNDS,
        "one creator per round"
    );
}

#[test]
fn the_docs_name_every_configmap_key_ending_that_migrate_reads() {
    use boxtable_operator::manifests::MANIFEST_EXTENSIONS;
    let endings: Vec<String> = MANIFEST_EXTENSIONS
        .iter()
        .map(|e| format!("`.{e}`"))
        .collect();
    let (last, rest) = endings.split_last().unwrap();
    let named = format!("ends in {} or {last}", rest.join(", "));
    for file in ["README.md", "charts/boxtable-operator/values.yaml"] {
        // Lines joined, comment markers dropped: the sentence may wrap.
        let text = std::fs::read_to_string(root().join(file))
            .unwrap()
            .lines()
            .map(|l| l.trim().trim_start_matches('#').trim())
            .collect::<Vec<_>>()
            .join(" ");
        assert!(
            text.contains(&named),
            "{file} does not say that a mounted ConfigMap's keys are read when their name {named}"
        );
    }
}
