//! The Helm chart in `charts/boxtable-operator/`, checked with real Helm 3 and Helm 4 (built from
//! their Go modules by `scripts/helm.sh`): it lints strictly, renders with default values into the
//! same objects as `kubectl kustomize deploy/` (every difference named here), renders each variant
//! as its values say, and installs into the real control plane.
//!
//! Helm comes from `HELM_V3` and `HELM_V4` (exported by `scripts/test.sh`), or is built into the
//! cache by `scripts/helm.sh path v3|v4` when they are unset. The install tests need the control
//! plane of `scripts/test.sh` (see tests/suite/support/control_plane.rs).

// Helpers fail the test they serve, exactly as the #[test] functions do.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;
use std::time::Duration;

use serde_json::{Value as Json, json};

use crate::support::control_plane::{ControlPlane, control_plane, kubectl_for_kustomize};
use crate::support::helm::helm_binary;
use crate::support::json::{self, Difference};
use crate::support::process::{run_ok, stdout_of_success};
use crate::support::wait::wait_until_blocking;

/// The chart, relative to the repository root.
const CHART: &str = "charts/boxtable-operator";
/// The namespace and release name under which the chart renders exactly what deploy/ installs.
const NAMESPACE: &str = "boxtable-system";
const RELEASE: &str = "boxtable-operator";
/// Labels Helm charts carry and deploy/ does not: the only label difference allowed.
const HELM_LABELS: [&str; 4] = [
    "helm.sh/chart",
    "app.kubernetes.io/managed-by",
    "app.kubernetes.io/instance",
    "app.kubernetes.io/version",
];
/// Every other difference between the chart's default render and `kubectl kustomize deploy/`,
/// and why it is there.
const NAMED_DIFFERENCES: &[(&str, &str)] = &[
    (
        "v1 Namespace boxtable-system: only in deploy/",
        "Helm keeps its release record in the release namespace, so the namespace exists before \
         the chart is installed; the README creates it with the same Pod Security labels",
    ),
    (
        "apiextensions.k8s.io/v1 CustomResourceDefinition boxtables.brighter.dev: \
         .metadata.annotations: only in the chart",
        "helm.sh/resource-policy: keep (crds.keep): `helm uninstall` leaves the CRD, since \
         deleting it deletes every BoxTable",
    ),
    (
        "admissionregistration.k8s.io/v1 ValidatingAdmissionPolicy \
         boxtable-operator-uninstall-guard: only in deploy/",
        "the uninstall guard keeps `kubectl delete -f` from deleting the operator along with the \
         CRD; `helm uninstall` keeps the CRD, so it deletes no BoxTable",
    ),
    (
        "admissionregistration.k8s.io/v1 ValidatingAdmissionPolicyBinding \
         boxtable-operator-uninstall-guard: only in deploy/",
        "the uninstall guard's binding, as above",
    ),
];
/// Values that turn on every monitoring object.
const MONITORING: &str =
    "serviceMonitor.enabled=true,prometheusRule.enabled=true,grafanaDashboard.enabled=true";
/// Values that secure the metrics server (`--metrics-secure` and its RBAC).
const SECURE_METRICS: &str = "metrics.secure=true";
/// A digest for the image variant.
const DIGEST: &str = "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";
/// How long an install step may take on a busy machine before the test gives up.
const DEADLINE: Duration = Duration::from_secs(180);

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// Helm's own config, cache and data directories for this process (never the user's).
fn helm_home() -> &'static Path {
    static HOME: OnceLock<tempfile::TempDir> = OnceLock::new();
    HOME.get_or_init(|| tempfile::tempdir().unwrap()).path()
}

/// Runs Helm `major` from the repository root; with a control plane, against it as the admin.
fn helm(major: &str, plane: Option<&ControlPlane>, args: &[&str]) -> Output {
    helm_command(major, plane)
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("running helm {major} {}: {e}", args.join(" ")))
}

/// Helm `major`, set to run from the repository root with Helm directories of its own; with a
/// control plane, against it as the admin. The caller adds the arguments.
pub(crate) fn helm_command(major: &str, plane: Option<&ControlPlane>) -> Command {
    let mut cmd = Command::new(helm_binary(major));
    cmd.current_dir(root())
        .env("HELM_CONFIG_HOME", helm_home().join("config"))
        .env("HELM_CACHE_HOME", helm_home().join("cache"))
        .env("HELM_DATA_HOME", helm_home().join("data"))
        .env_remove("HELM_NAMESPACE")
        .env_remove("HELM_KUBECONTEXT");
    match plane {
        Some(plane) => cmd.env("KUBECONFIG", &plane.admin_kubeconfig),
        // Rendering and linting need no cluster; make sure none is used.
        None => cmd.env("KUBECONFIG", helm_home().join("no-kubeconfig")),
    };
    cmd
}

/// Runs Helm and returns its stdout, failing the test with everything it printed otherwise.
fn helm_ok(major: &str, plane: Option<&ControlPlane>, args: &[&str]) -> String {
    let out = helm(major, plane, args);
    stdout_of_success(&format!("helm {major} {}", args.join(" ")), out)
}

/// Parses a multi-document YAML stream into its objects (empty documents dropped).
fn objects(yaml: &str) -> Vec<Json> {
    let docs: Vec<Json> = serde_saphyr::from_multiple(yaml).expect("rendered YAML parses");
    docs.into_iter().filter(|doc| !doc.is_null()).collect()
}

/// `helm template` of the chart as release `boxtable-operator` in `boxtable-system`.
fn template(major: &str, values: &[&str]) -> Vec<Json> {
    let mut args = vec!["template", RELEASE, CHART, "--namespace", NAMESPACE];
    args.extend_from_slice(values);
    objects(&helm_ok(major, None, &args))
}

/// `kubectl kustomize deploy/`.
fn kustomize_deploy() -> Vec<Json> {
    kustomize(&root().join("deploy"))
}

/// `kubectl kustomize <dir>`, as objects.
fn kustomize(dir: &Path) -> Vec<Json> {
    let kubectl = kubectl_for_kustomize();
    let out = Command::new(&kubectl)
        .arg("kustomize")
        .arg(dir)
        .current_dir(root())
        .output()
        .unwrap_or_else(|e| {
            panic!(
                "`{} kustomize` cannot run ({e}): run scripts/test.sh, which builds kubectl with \
                 the control plane, or set KUBECTL to a kubectl 1.27 or newer",
                kubectl.display()
            )
        });
    assert!(
        out.status.success(),
        "kubectl kustomize {} failed:\n{}",
        dir.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    objects(&String::from_utf8(out.stdout).unwrap())
}

/// `kubectl kustomize` of an overlay of deploy/ with `components` (paths from the repository's
/// root). kustomize takes only relative paths to bases, so the overlay lives in the
/// repository's ignored .tmp/ while it renders.
fn kustomize_with_components(components: &[&str]) -> Vec<Json> {
    std::fs::create_dir_all(root().join(".tmp")).unwrap();
    let dir = tempfile::Builder::new()
        .prefix("helm-chart-test-")
        .tempdir_in(root().join(".tmp"))
        .unwrap();
    let mut kustomization = "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\n\
        resources:\n  - ../../deploy\ncomponents:\n"
        .to_owned();
    for component in components {
        kustomization.push_str(&format!("  - ../../{component}\n"));
    }
    std::fs::write(dir.path().join("kustomization.yaml"), kustomization).unwrap();
    kustomize(dir.path())
}

/// Fails unless the chart rendered with Helm 3 and Helm 4 and `values` holds `expected`'s
/// objects, differing only as NAMED_DIFFERENCES allows.
fn assert_chart_renders(expected: &[Json], values: &[&str], what: &str) {
    for major in ["v3", "v4"] {
        let chart = template(major, values);
        let mut found = compare(expected, &chart);
        found.sort();
        let mut named = named_differences();
        named.sort();
        assert_eq!(
            found, named,
            "helm {major} {values:?} differs from {what} beyond the named differences \
             (NAMED_DIFFERENCES says why each is allowed)"
        );
    }
}

/// `<apiVersion> <kind> [<namespace>/]<name>`.
fn id(object: &Json) -> String {
    let metadata = &object["metadata"];
    let name = metadata["name"].as_str().unwrap_or_default();
    let qualified = match metadata["namespace"].as_str() {
        Some(namespace) => format!("{namespace}/{name}"),
        None => name.to_owned(),
    };
    format!(
        "{} {} {qualified}",
        object["apiVersion"].as_str().unwrap_or_default(),
        object["kind"].as_str().unwrap_or_default()
    )
}

fn kind(object: &Json) -> &str {
    object["kind"].as_str().unwrap_or_default()
}

fn by_id(objects: &[Json]) -> BTreeMap<String, Json> {
    let mut map = BTreeMap::new();
    for object in objects {
        assert!(
            map.insert(id(object), object.clone()).is_none(),
            "{} is rendered twice",
            id(object)
        );
    }
    map
}

/// Removes Helm's labels from `object`'s metadata, after checking that they are there.
fn without_helm_labels(mut object: Json, release: &str) -> Json {
    let what = id(&object);
    let labels = object["metadata"]["labels"]
        .as_object_mut()
        .unwrap_or_else(|| panic!("{what} has no labels"));
    let values = [
        format!("boxtable-operator-{}", env!("CARGO_PKG_VERSION")),
        "Helm".to_owned(),
        release.to_owned(),
        env!("CARGO_PKG_VERSION").to_owned(),
    ];
    for (label, value) in HELM_LABELS.into_iter().zip(values) {
        assert_eq!(
            labels.remove(label),
            Some(Json::String(value)),
            "{what}: label {label}"
        );
    }
    object
}

/// Every difference between two objects, as `<path>: <what>`. Numbers compare by value.
fn differences(path: &str, deploy: &Json, chart: &Json, out: &mut Vec<String>) {
    for (here, difference) in json::differences(path, deploy, chart) {
        out.push(match difference {
            Difference::OnlyInFirst => format!("{here}: only in deploy/"),
            Difference::OnlyInSecond => format!("{here}: only in the chart"),
            Difference::Changed(a, b) => format!("{here}: {a} in deploy/, {b} in the chart"),
        });
    }
}

/// Every difference between deploy/'s objects and the chart's, object by object.
fn compare(deploy: &[Json], chart: &[Json]) -> Vec<String> {
    let deploy = by_id(deploy);
    let chart: BTreeMap<String, Json> = by_id(chart)
        .into_iter()
        .map(|(id, object)| (id, without_helm_labels(object, RELEASE)))
        .collect();
    let mut out = Vec::new();
    for (id, object) in &deploy {
        let label = id.replacen(&format!(" {NAMESPACE}/"), " ", 1);
        match chart.get(id) {
            None => out.push(format!("{label}: only in deploy/")),
            Some(other) => {
                let mut found = Vec::new();
                differences("", object, other, &mut found);
                out.extend(found.into_iter().map(|f| format!("{label}: {f}")));
            }
        }
    }
    for id in chart.keys().filter(|id| !deploy.contains_key(*id)) {
        out.push(format!("{id}: only in the chart"));
    }
    out
}

fn named_differences() -> Vec<String> {
    NAMED_DIFFERENCES
        .iter()
        .map(|(what, _why)| (*what).to_owned())
        .collect()
}

fn find<'a>(objects: &'a [Json], kind_: &str, name: &str) -> &'a Json {
    objects
        .iter()
        .find(|o| kind(o) == kind_ && o["metadata"]["name"] == name)
        .unwrap_or_else(|| panic!("no {kind_} {name} in the render"))
}

fn container(objects: &[Json], deployment: &str) -> Json {
    find(objects, "Deployment", deployment)["spec"]["template"]["spec"]["containers"][0].clone()
}

fn args(container: &Json) -> Vec<String> {
    container["args"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a.as_str().unwrap().to_owned())
        .collect()
}

fn kinds(objects: &[Json]) -> BTreeSet<String> {
    objects.iter().map(|o| kind(o).to_owned()).collect()
}

// ---------------------------------------------------------------------------------------------
// The chart's files

#[test]
fn the_chart_version_and_app_version_are_the_crate_version() {
    let text = std::fs::read_to_string(root().join(CHART).join("Chart.yaml")).unwrap();
    let chart: Json = serde_saphyr::from_str(&text).unwrap();
    assert_eq!(
        chart["version"],
        env!("CARGO_PKG_VERSION"),
        "Chart.yaml version"
    );
    assert_eq!(
        chart["appVersion"],
        env!("CARGO_PKG_VERSION"),
        "Chart.yaml appVersion"
    );
}

/// Files the chart carries as copies (it cannot read outside its folder), and their sources.
const COPIES: [(&str, &str); 3] = [
    ("crds/boxtable.yaml", "files/boxtable-crd.yaml"),
    (
        "deploy/monitoring/prometheusrule.yaml",
        "files/monitoring/prometheusrule.yaml",
    ),
    (
        "deploy/monitoring/dashboards/boxtable-operator.json",
        "files/monitoring/boxtable-operator.json",
    ),
];

#[test]
fn the_chart_carries_the_crd_the_alerts_and_the_dashboard_unchanged() {
    for (source, copy) in COPIES {
        let source = root().join(source);
        let copy = root().join(CHART).join(copy);
        let expected = std::fs::read_to_string(&source).unwrap();
        if std::env::var_os("UPDATE_GOLDEN").is_some() {
            std::fs::write(&copy, &expected).unwrap();
        }
        let found = std::fs::read_to_string(&copy).unwrap_or_default();
        assert!(
            found == expected,
            "{} differs from {}: copy it over (or run UPDATE_GOLDEN=1 cargo test --test suite -- helm_chart::)",
            copy.display(),
            source.display()
        );
    }
}

/// Values documented as one row although they are maps.
const WHOLE_VALUES: [&str; 6] = [
    "resources",
    "migrationJob.resources",
    "podSecurityContext",
    "securityContext",
    "nodeSelector",
    "grafanaDashboard.labels",
];

fn value_paths(prefix: &str, value: &Json, out: &mut BTreeSet<String>) {
    match value.as_object() {
        Some(map) if !map.is_empty() && !WHOLE_VALUES.contains(&prefix) => {
            for (key, inner) in map {
                let path = if prefix.is_empty() {
                    key.clone()
                } else {
                    format!("{prefix}.{key}")
                };
                value_paths(&path, inner, out);
            }
        }
        _ => {
            out.insert(prefix.to_owned());
        }
    }
}

#[test]
fn the_chart_readme_documents_every_value_in_values_yaml() {
    let values: Json = serde_saphyr::from_str(
        &std::fs::read_to_string(root().join(CHART).join("values.yaml")).unwrap(),
    )
    .unwrap();
    let mut in_values = BTreeSet::new();
    value_paths("", &values, &mut in_values);
    let readme = std::fs::read_to_string(root().join(CHART).join("README.md")).unwrap();
    let in_readme: BTreeSet<String> = readme
        .lines()
        .filter_map(|line| line.strip_prefix("| `"))
        .filter_map(|rest| rest.split_once('`'))
        .map(|(path, _)| path.to_owned())
        .collect();
    assert_eq!(
        in_readme, in_values,
        "the values table of {CHART}/README.md and values.yaml disagree"
    );
}

// ---------------------------------------------------------------------------------------------
// helm lint

/// The values of every variant the tests render, as Helm arguments.
fn lint_variants() -> Vec<Vec<String>> {
    let sets = |list: &[&str]| list.iter().map(|s| (*s).to_owned()).collect::<Vec<_>>();
    vec![
        vec![],
        sets(&["--set-json", r#"watchNamespaces=["shop","billing"]"#]),
        sets(&["--set", "replicas=1"]),
        sets(&["--set", "replicas=3"]),
        sets(&["--set", &format!("image.digest={DIGEST}")]),
        sets(&["--set", MONITORING]),
        sets(&["--set", &format!("{MONITORING},{SECURE_METRICS}")]),
        sets(&["--set", "networkPolicy.enabled=true"]),
        sets(&[
            "--set",
            "podDisruptionBudget.enabled=false,crds.install=false",
        ]),
        sets(&["--set", MIGRATION_JOB]),
    ]
}

/// Values that turn the migration hook Job on, for the manifests and Secret of examples/jobs/.
const MIGRATION_JOB: &str = "migrationJob.enabled=true,migrationJob.manifestsConfigMap=shop-boxtables,migrationJob.databaseSecret.name=shop-db";

#[test]
fn the_migration_hook_job_is_the_helm_hook_example_and_the_server_accepts_it_without_warnings() {
    let example: Json = serde_saphyr::from_str(
        &std::fs::read_to_string(root().join("examples/jobs/helm-hook-job.yaml")).unwrap(),
    )
    .unwrap();
    let plane = control_plane();
    for major in ["v3", "v4"] {
        let defaults = template(major, &[]);
        assert!(
            !kinds(&defaults).contains("Job"),
            "helm {major}: no Job unless asked for"
        );
        let objects = template(major, &["--set", MIGRATION_JOB]);
        let job = find(&objects, "Job", "boxtable-operator-migrate");
        for key in [
            "helm.sh/hook",
            "helm.sh/hook-weight",
            "helm.sh/hook-delete-policy",
        ] {
            assert_eq!(
                job["metadata"]["annotations"][key], example["metadata"]["annotations"][key],
                "helm {major}: {key}"
            );
        }
        let pod = &job["spec"]["template"]["spec"];
        let example_pod = &example["spec"]["template"]["spec"];
        for pointer in [
            "/containers/0/args",
            "/containers/0/volumeMounts",
            "/volumes",
            "/restartPolicy",
            "/automountServiceAccountToken",
            "/securityContext/fsGroup",
            "/containers/0/securityContext/readOnlyRootFilesystem",
            "/containers/0/securityContext/allowPrivilegeEscalation",
            "/containers/0/securityContext/capabilities",
        ] {
            assert_eq!(
                pod.pointer(pointer),
                example_pod.pointer(pointer),
                "helm {major}: {pointer}"
            );
        }
        let out = plane.kubectl_as(
            &plane.admin_kubeconfig,
            &["create", "--dry-run=server", "-f", "-"],
            Some(&job.to_string()),
        );
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            out.status.success() && !stderr.contains("Warning"),
            "helm {major}: {stderr}"
        );
        let refused = helm(
            major,
            None,
            &[
                "template",
                RELEASE,
                CHART,
                "--set",
                "migrationJob.enabled=true",
            ],
        );
        let text = String::from_utf8_lossy(&refused.stderr);
        assert!(
            !refused.status.success() && text.contains("migrationJob.manifestsConfigMap"),
            "helm {major}: {text}"
        );
    }
}

#[test]
fn helm_lint_strict_passes_for_every_variant_with_helm_3_and_helm_4() {
    for major in ["v3", "v4"] {
        for variant in lint_variants() {
            let mut args = vec!["lint", "--strict", CHART];
            args.extend(variant.iter().map(String::as_str));
            let out = helm_ok(major, None, &args);
            assert!(
                out.contains("1 chart(s) linted, 0 chart(s) failed"),
                "helm {major} lint {variant:?}:\n{out}"
            );
        }
    }
}

#[test]
fn helm_lint_rejects_values_the_schema_does_not_allow() {
    for major in ["v3", "v4"] {
        for bad in ["logFormat=xml", "replicass=2", "image.digest=latest"] {
            let out = helm(major, None, &["lint", "--strict", CHART, "--set", bad]);
            assert!(
                !out.status.success(),
                "helm {major} lint accepted --set {bad}:\n{}",
                String::from_utf8_lossy(&out.stdout)
            );
        }
    }
}

// ---------------------------------------------------------------------------------------------
// helm template with default values against kustomize

#[test]
fn default_values_render_the_objects_of_deploy_with_helm_3_and_helm_4() {
    assert_chart_renders(&kustomize_deploy(), &[], "kubectl kustomize deploy/");
}

#[test]
fn the_comparison_catches_a_changed_field_and_a_missing_object() {
    let deploy = kustomize_deploy();
    let mut chart = template("v4", &[]);
    let deployment = chart.iter_mut().find(|o| kind(o) == "Deployment").unwrap();
    deployment["spec"]["template"]["spec"]["containers"][0]["securityContext"]["readOnlyRootFilesystem"] =
        json!(false);
    chart.retain(|o| kind(o) != "PodDisruptionBudget");
    let mut expected = named_differences();
    expected.push(
        "apps/v1 Deployment boxtable-operator: \
         .spec.template.spec.containers[0].securityContext.readOnlyRootFilesystem: \
         true in deploy/, false in the chart"
            .to_owned(),
    );
    expected.push("policy/v1 PodDisruptionBudget boxtable-operator: only in deploy/".to_owned());
    let mut found = compare(&deploy, &chart);
    found.sort();
    expected.sort();
    assert_eq!(found, expected);
}

#[test]
fn the_chart_crd_is_the_generated_crd() {
    let generated: Json = serde_saphyr::from_str(
        &std::fs::read_to_string(root().join("crds/boxtable.yaml")).unwrap(),
    )
    .unwrap();
    let chart = template("v3", &[]);
    let mut crd = find(&chart, "CustomResourceDefinition", "boxtables.brighter.dev").clone();
    crd["metadata"] = json!({"name": "boxtables.brighter.dev"});
    let mut found = Vec::new();
    differences("", &generated, &crd, &mut found);
    assert!(found.is_empty(), "the chart's CRD differs: {found:?}");
}

// ---------------------------------------------------------------------------------------------
// Variants, rendered

#[test]
fn watched_namespaces_get_roles_there_and_nothing_cluster_wide() {
    let deploy = kustomize_deploy();
    let cluster_rules = &find(&deploy, "ClusterRole", "boxtable-operator")["rules"];
    for major in ["v3", "v4"] {
        let chart = template(
            major,
            &["--set-json", r#"watchNamespaces=["shop","billing","shop"]"#],
        );
        assert!(
            !chart.iter().any(|o| kind(o) == "ClusterRoleBinding"),
            "helm {major}: a ClusterRoleBinding with watchNamespaces"
        );
        let cluster_roles: BTreeSet<&str> = chart
            .iter()
            .filter(|o| kind(o) == "ClusterRole")
            .map(|o| o["metadata"]["name"].as_str().unwrap())
            .collect();
        assert_eq!(
            cluster_roles,
            BTreeSet::from(["boxtable-operator-edit", "boxtable-operator-view"]),
            "helm {major}: only the user-facing roles are cluster-wide"
        );
        let roles: BTreeMap<&str, &Json> = chart
            .iter()
            .filter(|o| kind(o) == "Role" && o["metadata"]["name"] == "boxtable-operator")
            .map(|o| (o["metadata"]["namespace"].as_str().unwrap(), &o["rules"]))
            .collect();
        assert_eq!(
            roles.keys().copied().collect::<Vec<_>>(),
            ["billing", "shop"]
        );
        for (namespace, rules) in roles {
            assert_eq!(
                rules, cluster_rules,
                "helm {major}: the Role in {namespace} grants what deploy/'s ClusterRole grants"
            );
            let binding = chart
                .iter()
                .find(|o| {
                    kind(o) == "RoleBinding"
                        && o["metadata"]["name"] == "boxtable-operator"
                        && o["metadata"]["namespace"] == namespace
                })
                .unwrap_or_else(|| panic!("no RoleBinding in {namespace}"));
            assert_eq!(
                binding["subjects"],
                json!([{"kind": "ServiceAccount", "name": "boxtable-operator", "namespace": NAMESPACE}])
            );
            assert_eq!(binding["roleRef"]["kind"], "Role");
        }
        let args = args(&container(&chart, "boxtable-operator"));
        let namespaces: Vec<&str> = args
            .iter()
            .filter_map(|a| a.strip_prefix("--namespace="))
            .collect();
        assert_eq!(namespaces, ["shop", "billing"], "helm {major}: {args:?}");
    }
}

#[test]
fn watching_shop_and_billing_renders_the_objects_of_the_namespaced_install_example() {
    assert_chart_renders(
        &kustomize(&root().join("examples/namespaced-install")),
        &["--set-json", r#"watchNamespaces=["shop","billing"]"#],
        "examples/namespaced-install",
    );
}

#[test]
fn secure_metrics_render_the_objects_of_the_secure_metrics_example() {
    assert_chart_renders(
        &kustomize(&root().join("examples/secure-metrics")),
        &["--set", SECURE_METRICS],
        "examples/secure-metrics",
    );
}

#[test]
fn a_secret_label_selector_reaches_the_operator_flag() {
    for major in ["v3", "v4"] {
        let flags = |values: &[&str]| -> Vec<String> {
            args(&container(&template(major, values), "boxtable-operator"))
                .into_iter()
                .filter(|a| a.starts_with("--secret-label-selector"))
                .collect()
        };
        assert!(flags(&[]).is_empty(), "helm {major}: a selector by default");
        assert_eq!(
            flags(&[
                "--set-string",
                "secrets.labelSelector=brighter.dev/connection=true"
            ]),
            ["--secret-label-selector=brighter.dev/connection=true"],
            "helm {major}"
        );
    }
}

#[test]
fn leader_election_is_on_exactly_when_more_than_one_replica_runs() {
    let cases: [(&[&str], i64, bool); 4] = [
        (&[], 2, true),
        (&["--set", "replicas=1"], 1, false),
        (&["--set", "replicas=3"], 3, true),
        (
            &["--set", "replicas=1,leaderElection.enabled=true"],
            1,
            true,
        ),
    ];
    for major in ["v3", "v4"] {
        for (values, replicas, elected) in cases {
            let chart = template(major, values);
            let deployment = find(&chart, "Deployment", "boxtable-operator");
            assert_eq!(deployment["spec"]["replicas"], replicas, "{values:?}");
            let args = args(&container(&chart, "boxtable-operator"));
            assert_eq!(
                args.iter().any(|a| a == "--leader-election"),
                elected,
                "helm {major} {values:?}: {args:?}"
            );
            let role = chart.iter().any(|o| {
                kind(o) == "Role" && o["metadata"]["name"] == "boxtable-operator-leader-election"
            });
            assert_eq!(
                role, elected,
                "helm {major} {values:?}: the leader-election Role"
            );
        }
    }
}

#[test]
fn a_digest_pins_the_image_and_a_tag_overrides_the_app_version() {
    for major in ["v3", "v4"] {
        let image = |values: &[&str]| {
            container(&template(major, values), "boxtable-operator")["image"]
                .as_str()
                .unwrap()
                .to_owned()
        };
        assert_eq!(
            image(&[]),
            format!(
                "ghcr.io/boxtable/boxtable-operator:{}",
                env!("CARGO_PKG_VERSION")
            )
        );
        assert_eq!(
            image(&["--set", &format!("image.digest={DIGEST},image.tag=ignored")]),
            format!("ghcr.io/boxtable/boxtable-operator@{DIGEST}")
        );
        assert_eq!(
            image(&[
                "--set",
                "image.repository=registry.example/bt,image.tag=1.2.3"
            ]),
            "registry.example/bt:1.2.3"
        );
    }
}

#[test]
fn values_reach_the_deployment() {
    let chart = template(
        "v4",
        &[
            "--set",
            "logFormat=text,logLevel=debug,image.pullPolicy=Always",
            "--set",
            "podLabels.team=data,podAnnotations.note=x,commonLabels.tier=ops",
            "--set-json",
            r#"extraArgs=["--concurrency=8"]"#,
            "--set-json",
            r#"extraEnv=[{"name":"EXTRA","value":"1"}]"#,
            "--set-json",
            r#"tolerations=[{"key":"dedicated","operator":"Exists"}]"#,
            "--set-json",
            r#"resources={"requests":{"cpu":"1"}}"#,
        ],
    );
    let deployment = find(&chart, "Deployment", "boxtable-operator");
    let pod = &deployment["spec"]["template"];
    assert_eq!(pod["metadata"]["labels"]["team"], "data");
    assert_eq!(pod["metadata"]["annotations"]["note"], "x");
    assert_eq!(pod["spec"]["tolerations"][0]["key"], "dedicated");
    for object in &chart {
        assert_eq!(
            object["metadata"]["labels"]["tier"],
            "ops",
            "{}",
            id(object)
        );
    }
    let container = container(&chart, "boxtable-operator");
    let args = args(&container);
    assert!(args.contains(&"--log-format=text".to_owned()), "{args:?}");
    assert_eq!(args.last().map(String::as_str), Some("--concurrency=8"));
    assert_eq!(container["imagePullPolicy"], "Always");
    // Helm merges the given map into the default one.
    assert_eq!(
        container["resources"],
        json!({"requests": {"cpu": "1", "memory": "64Mi"}, "limits": {"cpu": "500m", "memory": "128Mi"}})
    );
    let env: BTreeMap<&str, &Json> = container["env"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| (e["name"].as_str().unwrap(), e))
        .collect();
    assert_eq!(env["RUST_LOG"]["value"], "debug");
    assert_eq!(env["EXTRA"]["value"], "1");
    assert!(env.contains_key("POD_NAME") && env.contains_key("POD_NAMESPACE"));
}

#[test]
fn the_monitoring_objects_match_the_kustomize_monitoring_component() {
    let deploy = kustomize_with_components(&["deploy/monitoring"]);
    let monitoring = [
        ("ServiceMonitor", "boxtable-operator"),
        ("PrometheusRule", "boxtable-operator"),
        ("ConfigMap", "boxtable-operator-dashboard"),
    ];
    // The alerts as written: kustomize re-emits a folded expression with a more-indented line
    // as a literal block with a blank line added (PromQL ignores it), so their exprs are compared
    // with whitespace collapsed, and the rules as a whole against the source file.
    let source: Json = serde_saphyr::from_str(
        &std::fs::read_to_string(root().join("deploy/monitoring/prometheusrule.yaml")).unwrap(),
    )
    .unwrap();
    let deploy: Vec<Json> = deploy.into_iter().map(collapse_rule_whitespace).collect();
    for major in ["v3", "v4"] {
        let chart = template(major, &["--set", MONITORING]);
        let rule = find(&chart, "PrometheusRule", "boxtable-operator");
        assert_eq!(
            rule["spec"], source["spec"],
            "helm {major}: the alerts as written"
        );
        for (kind_, name) in monitoring {
            let expected = find(&deploy, kind_, name);
            let object = collapse_rule_whitespace(without_helm_labels(
                find(&chart, kind_, name).clone(),
                RELEASE,
            ));
            let mut found = Vec::new();
            differences("", expected, &object, &mut found);
            assert!(found.is_empty(), "helm {major} {kind_}: {found:?}");
        }
        let defaults = kinds(&template(major, &[]));
        for (kind_, _) in monitoring {
            assert!(
                !defaults.contains(kind_),
                "helm {major}: {kind_} by default"
            );
        }
    }
}

#[test]
fn with_secure_metrics_the_servicemonitor_matches_the_kustomize_components() {
    let deploy =
        kustomize_with_components(&["deploy/monitoring", "deploy/components/secure-metrics"]);
    let expected = find(&deploy, "ServiceMonitor", "boxtable-operator");
    assert_eq!(expected["spec"]["endpoints"][0]["scheme"], "https");
    for major in ["v3", "v4"] {
        let chart = template(
            major,
            &[
                "--set",
                &format!("serviceMonitor.enabled=true,{SECURE_METRICS}"),
            ],
        );
        let monitor = without_helm_labels(
            find(&chart, "ServiceMonitor", "boxtable-operator").clone(),
            RELEASE,
        );
        let mut found = Vec::new();
        differences("", expected, &monitor, &mut found);
        assert!(found.is_empty(), "helm {major} ServiceMonitor: {found:?}");
    }
}

/// A PrometheusRule with every expression's whitespace runs collapsed to one space.
fn collapse_rule_whitespace(mut object: Json) -> Json {
    if kind(&object) != "PrometheusRule" {
        return object;
    }
    for group in object["spec"]["groups"].as_array_mut().unwrap() {
        for rule in group["rules"].as_array_mut().unwrap() {
            let expr = rule["expr"].as_str().unwrap();
            rule["expr"] = json!(expr.split_whitespace().collect::<Vec<_>>().join(" "));
        }
    }
    object
}

#[test]
fn the_operator_down_alert_follows_the_release_name() {
    for major in ["v3", "v4"] {
        let out = helm_ok(
            major,
            None,
            &[
                "template",
                "shop",
                CHART,
                "--set",
                "prometheusRule.enabled=true",
            ],
        );
        let chart = objects(&out);
        let service = find(&chart, "Service", "shop-boxtable-operator-metrics");
        let rule = find(&chart, "PrometheusRule", "shop-boxtable-operator");
        let exprs: Vec<&str> = rule["spec"]["groups"][0]["rules"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| r["expr"].as_str().unwrap())
            .collect();
        let job = format!("job=\"{}\"", service["metadata"]["name"].as_str().unwrap());
        assert!(
            exprs.iter().any(|e| e.contains(&job)),
            "helm {major}: no alert scrapes {job}: {exprs:?}"
        );
        assert!(
            !exprs
                .iter()
                .any(|e| e.contains("job=\"boxtable-operator-metrics\"")),
            "helm {major}: {exprs:?}"
        );
    }
}

#[test]
fn the_network_policy_admits_scrapes_and_lets_out_dns_the_api_server_and_postgres() {
    for major in ["v3", "v4"] {
        assert!(!kinds(&template(major, &[])).contains("NetworkPolicy"));
        let chart = template(
            major,
            &[
                "--set",
                "networkPolicy.enabled=true",
                "--set-json",
                r#"networkPolicy.egress.postgres.to=[{"ipBlock":{"cidr":"10.1.0.0/16"}}]"#,
            ],
        );
        let policy = &find(&chart, "NetworkPolicy", "boxtable-operator")["spec"];
        assert_eq!(
            policy["podSelector"]["matchLabels"],
            json!({"app.kubernetes.io/name": "boxtable-operator", "app.kubernetes.io/component": "controller"})
        );
        assert_eq!(policy["policyTypes"], json!(["Ingress", "Egress"]));
        assert_eq!(
            policy["ingress"],
            json!([{"ports": [{"port": "metrics", "protocol": "TCP"}]}])
        );
        assert_eq!(
            policy["egress"],
            json!([
                {"ports": [{"port": 53, "protocol": "UDP"}, {"port": 53, "protocol": "TCP"}]},
                {"ports": [{"port": 443, "protocol": "TCP"}, {"port": 6443, "protocol": "TCP"}]},
                {"ports": [{"port": 5432, "protocol": "TCP"}], "to": [{"ipBlock": {"cidr": "10.1.0.0/16"}}]},
            ])
        );
    }
}

// ---------------------------------------------------------------------------------------------
// Installs into the real control plane

/// The Prometheus Operator's ServiceMonitor and PrometheusRule CRDs, installed once into the
/// control plane.
fn install_prometheus_operator_crds(plane: &ControlPlane) {
    static DONE: OnceLock<()> = OnceLock::new();
    DONE.get_or_init(|| {
        let printed = run_ok(
            "scripts/prometheus-operator-crds.sh",
            &mut Command::new(root().join("scripts/prometheus-operator-crds.sh")),
        );
        let dir = PathBuf::from(printed.trim());
        for plural in ["servicemonitors", "prometheusrules"] {
            let file = dir.join(format!("monitoring.coreos.com_{plural}.yaml"));
            plane
                .kubectl_admin(
                    &["apply", "--server-side", "-f", file.to_str().unwrap()],
                    None,
                )
                .unwrap_or_else(|m| panic!("{m}"));
            plane
                .kubectl_admin(
                    &[
                        "wait",
                        "--for=condition=Established",
                        &format!("crd/{plural}.monitoring.coreos.com"),
                        "--timeout=180s",
                    ],
                    None,
                )
                .unwrap_or_else(|m| panic!("{m}"));
        }
    });
}

/// Installs the chart with Helm `major` as release `release` into a new namespace (the CRD is
/// already there, from deploy/), checks that the server holds every object of the release's
/// manifest, and returns the namespace and the manifest's objects. The release stays installed.
fn install(
    plane: &ControlPlane,
    major: &str,
    release: &str,
    values: &[&str],
) -> (String, Vec<Json>) {
    let namespace = plane.create_namespace(release);
    let mut args = vec![
        "install",
        release,
        CHART,
        "--namespace",
        &namespace,
        "--set",
        "crds.install=false",
        "--timeout",
        "5m",
    ];
    args.extend_from_slice(values);
    helm_ok(major, Some(plane), &args);
    let manifest = helm_ok(
        major,
        Some(plane),
        &["get", "manifest", release, "--namespace", &namespace],
    );
    let expected = objects(&manifest);
    assert!(!expected.is_empty(), "helm {major}: an empty manifest");
    let stored = plane
        .kubectl_admin(&["get", "-f", "-", "-o", "json"], Some(&manifest))
        .unwrap_or_else(|m| {
            panic!("helm {major} install {release}: not every object is stored: {m}")
        });
    let stored: Json = serde_json::from_str(&stored).unwrap();
    let stored: Vec<Json> = match stored.get("items") {
        Some(items) => items.as_array().unwrap().clone(),
        None => vec![stored],
    };
    assert_eq!(
        stored.iter().map(id).collect::<BTreeSet<_>>(),
        expected.iter().map(id).collect::<BTreeSet<_>>(),
        "helm {major} install {release}: the stored objects are the manifest's"
    );
    for object in &stored {
        assert_eq!(
            object["metadata"]["labels"]["app.kubernetes.io/instance"],
            release,
            "{}",
            id(object)
        );
    }
    (namespace, expected)
}

/// Uninstalls `release` and waits until none of its objects is left.
fn uninstall(plane: &ControlPlane, major: &str, release: &str, namespace: &str, manifest: &[Json]) {
    helm_ok(
        major,
        Some(plane),
        &[
            "uninstall",
            release,
            "--namespace",
            namespace,
            "--timeout",
            "5m",
        ],
    );
    let yaml: String = manifest
        .iter()
        .map(|o| format!("---\n{}\n", serde_json::to_string(o).unwrap()))
        .collect();
    wait_until_blocking(
        &format!("helm {major} uninstall {release} removes its objects"),
        DEADLINE,
        || match plane.kubectl_admin(
            &["get", "-f", "-", "--ignore-not-found", "-o", "name"],
            Some(&yaml),
        ) {
            Ok(left) if left.trim().is_empty() => Ok(()),
            Ok(left) => Err(format!("still there: {left}")),
            Err(m) => Err(m),
        },
    );
    let _ = plane.kubectl_admin(&["delete", "namespace", namespace, "--wait=false"], None);
}

/// `kubectl auth can-i` for the release's ServiceAccount.
fn can_i(plane: &ControlPlane, service_account: &str, args: &[&str]) -> bool {
    let mut all = vec!["auth", "can-i", "--as", service_account];
    all.extend_from_slice(args);
    let out = plane.kubectl_as(&plane.admin_kubeconfig, &all, None);
    match String::from_utf8_lossy(&out.stdout).trim() {
        "yes" => true,
        "no" => false,
        other => panic!(
            "kubectl {}: {other} {}",
            all.join(" "),
            String::from_utf8_lossy(&out.stderr)
        ),
    }
}

#[test]
fn every_variant_installs_into_the_control_plane_with_helm_3_and_helm_4() {
    let plane = control_plane();
    install_prometheus_operator_crds(plane);
    let digest = format!("image.digest={DIGEST}");
    let secure = format!("{MONITORING},{SECURE_METRICS}");
    let variants: [(&str, Vec<&str>); 7] = [
        ("defaults", vec![]),
        ("replicas", vec!["--set", "replicas=3"]),
        ("single", vec!["--set", "replicas=1"]),
        ("digest", vec!["--set", &digest]),
        ("monitor", vec!["--set", MONITORING]),
        ("netpol", vec!["--set", "networkPolicy.enabled=true"]),
        ("secure", vec!["--set", &secure]),
    ];
    for major in ["v3", "v4"] {
        for (name, values) in &variants {
            let release = format!("helm{}-{name}", &major[1..]);
            let (namespace, manifest) = install(plane, major, &release, values);
            let expected_kinds = kinds(&manifest);
            match *name {
                "monitor" => {
                    for monitoring in ["ServiceMonitor", "PrometheusRule", "ConfigMap"] {
                        assert!(expected_kinds.contains(monitoring), "{monitoring}");
                    }
                }
                "netpol" => assert!(expected_kinds.contains("NetworkPolicy")),
                _ => {}
            }
            let account = format!("system:serviceaccount:{namespace}:{release}-boxtable-operator");
            for review in [
                "tokenreviews.authentication.k8s.io",
                "subjectaccessreviews.authorization.k8s.io",
            ] {
                assert_eq!(
                    can_i(plane, &account, &["create", review]),
                    *name == "secure",
                    "helm {major} {name}: create {review}"
                );
            }
            uninstall(plane, major, &release, &namespace, &manifest);
        }
    }
}

#[test]
fn an_upgrade_to_more_replicas_turns_leader_election_on_and_back_off() {
    let plane = control_plane();
    for major in ["v3", "v4"] {
        let release = format!("helm{}-upgrade", &major[1..]);
        let (namespace, first) = install(plane, major, &release, &["--set", "replicas=1"]);
        let deployment = format!("deployment/{release}-boxtable-operator");
        let role = format!("role/{release}-boxtable-operator-leader-election");
        let stored = |what: &str| {
            plane
                .kubectl_admin(&["-n", &namespace, "get", what, "-o", "json"], None)
                .map(|json| serde_json::from_str::<Json>(&json).unwrap())
        };
        let elected = |deployment: &Json| {
            deployment["spec"]["template"]["spec"]["containers"][0]["args"]
                .as_array()
                .unwrap()
                .contains(&json!("--leader-election"))
        };
        let before = stored(&deployment).unwrap();
        assert_eq!(before["spec"]["replicas"], 1);
        assert!(!elected(&before), "helm {major}: one replica, no election");
        assert!(
            stored(&role).is_err(),
            "helm {major}: a Role for one replica"
        );
        for (replicas, expect_election) in [("3", true), ("1", false)] {
            helm_ok(
                major,
                Some(plane),
                &[
                    "upgrade",
                    &release,
                    CHART,
                    "--namespace",
                    &namespace,
                    "--reuse-values",
                    "--set",
                    &format!("replicas={replicas}"),
                    "--timeout",
                    "5m",
                ],
            );
            let after = stored(&deployment).unwrap();
            assert_eq!(
                after["spec"]["replicas"],
                json!(replicas.parse::<i64>().unwrap())
            );
            assert_eq!(
                elected(&after),
                expect_election,
                "helm {major}: {replicas} replicas"
            );
            // Helm deletes objects an upgrade no longer renders before it returns.
            assert_eq!(
                stored(&role).is_ok(),
                expect_election,
                "helm {major}: the leader-election Role with {replicas} replicas"
            );
        }
        uninstall(plane, major, &release, &namespace, &first);
    }
}

#[test]
fn an_install_watching_two_namespaces_can_act_there_and_nowhere_else() {
    let plane = control_plane();
    let shop = plane.create_namespace("helm-shop");
    let billing = plane.create_namespace("helm-billing");
    let elsewhere = plane.create_namespace("helm-elsewhere");
    for major in ["v3", "v4"] {
        let release = format!("helm{}-watch", &major[1..]);
        let watch = format!(r#"watchNamespaces=["{shop}","{billing}"]"#);
        let (namespace, manifest) = install(plane, major, &release, &["--set-json", &watch]);
        let account = format!("system:serviceaccount:{namespace}:{release}-boxtable-operator");
        for ns in [&shop, &billing] {
            for (verb, resource) in [
                ("list", "boxtables.brighter.dev"),
                ("watch", "boxtables.brighter.dev"),
                ("patch", "boxtables.brighter.dev"),
                ("patch", "boxtables.brighter.dev/status"),
                ("list", "secrets"),
                ("watch", "secrets"),
                ("patch", "secrets"),
                ("create", "events.events.k8s.io"),
            ] {
                assert!(
                    can_i(plane, &account, &[verb, resource, "-n", ns]),
                    "helm {major}: {verb} {resource} in {ns}"
                );
            }
        }
        for (verb, resource) in [("list", "secrets"), ("list", "boxtables.brighter.dev")] {
            assert!(
                !can_i(plane, &account, &[verb, resource, "--all-namespaces"]),
                "helm {major}: {verb} {resource} cluster-wide"
            );
            assert!(
                !can_i(plane, &account, &[verb, resource, "-n", &elsewhere]),
                "helm {major}: {verb} {resource} in an unwatched namespace"
            );
        }
        assert!(can_i(
            plane,
            &account,
            &["create", "leases.coordination.k8s.io", "-n", &namespace]
        ));
        assert!(!can_i(
            plane,
            &account,
            &["get", "secrets", "-n", &namespace]
        ));
        // Secrets are read with a list by name, never a get (see deploy/README.md).
        for ns in [&shop, &billing] {
            assert!(
                !can_i(plane, &account, &["get", "secrets", "-n", ns]),
                "helm {major}: get secrets in {ns}"
            );
        }
        uninstall(plane, major, &release, &namespace, &manifest);
    }
}

#[test]
fn the_default_render_including_the_crd_is_accepted_by_the_server() {
    let plane = control_plane();
    for major in ["v3", "v4"] {
        let yaml = helm_ok(
            major,
            None,
            &["template", RELEASE, CHART, "--namespace", NAMESPACE],
        );
        plane
            .kubectl_admin(
                &[
                    "apply",
                    "--server-side",
                    "--force-conflicts",
                    "--field-manager=helm-chart-test",
                    "--dry-run=server",
                    "-f",
                    "-",
                ],
                Some(&yaml),
            )
            .unwrap_or_else(|m| panic!("helm {major}: {m}"));
    }
}

/// The version a go.mod settles for each module it names: its `require` lines, overridden by its
/// `replace` lines.
fn go_module_versions(go_mod: &str) -> BTreeMap<String, String> {
    let text = std::fs::read_to_string(root().join(go_mod)).unwrap();
    let mut required = BTreeMap::new();
    let mut replaced = BTreeMap::new();
    let mut block = "";
    for line in text.lines().map(str::trim) {
        let (kind, rest) = match line {
            "require (" | "replace (" => {
                block = &line[..7];
                continue;
            }
            ")" => {
                block = "";
                continue;
            }
            _ if line.starts_with("require ") => ("require", &line[8..]),
            _ if line.starts_with("replace ") => ("replace", &line[8..]),
            _ => (block, line),
        };
        let words: Vec<&str> = rest.split_whitespace().collect();
        match (kind, words.as_slice()) {
            ("require", [module, version, ..]) => {
                required.insert((*module).to_owned(), (*version).to_owned());
            }
            ("replace", [module, "=>", _, version, ..]) => {
                replaced.insert((*module).to_owned(), (*version).to_owned());
            }
            _ => {}
        }
    }
    required.extend(replaced);
    required
}

#[test]
fn helm_and_the_control_plane_build_shared_go_modules_at_one_version() {
    // Go's build cache compiles a package once only when the package and everything it imports
    // are at the same versions; with the control plane built first, most of each Helm (client-go,
    // apimachinery, the API types) then comes from the cache instead of being compiled again.
    let modules = [
        "tools/control-plane/go.mod",
        "tools/helm-v3/go.mod",
        "tools/helm-v4/go.mod",
    ];
    let versions: Vec<_> = modules.iter().map(|m| go_module_versions(m)).collect();
    assert!(
        versions[0].contains_key("k8s.io/client-go")
            && versions[1].contains_key("k8s.io/client-go"),
        "the go.mod reader found no client-go: {versions:?}"
    );
    let mut differing = Vec::new();
    for (i, a) in versions.iter().enumerate() {
        for (j, b) in versions.iter().enumerate().skip(i + 1) {
            for (module, version) in a {
                if let Some(other) = b.get(module).filter(|other| *other != version) {
                    differing.push(format!(
                        "{module}: {version} in {} but {other} in {}",
                        modules[i], modules[j]
                    ));
                }
            }
        }
    }
    assert!(
        differing.is_empty(),
        "raise the lower versions to the higher one (go mod edit -require, then go mod tidy):\n{}",
        differing.join("\n")
    );
}
