//! The production manifests in `deploy/`, rendered with `kubectl kustomize` exactly as users apply
//! them: every object must match its Kubernetes schema field for field, the Deployment must be
//! hardened, and RBAC must grant exactly the calls the operator makes.
//!
//! Renders with the control plane's kubectl when `scripts/test.sh` has built one, else with
//! `kubectl` on PATH (or its path in `KUBECTL`); without one the tests fail and say how to get it.

// Helpers fail the test they serve, exactly as the #[test] functions do.

use std::collections::BTreeSet;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

use k8s_openapi::api::admissionregistration::v1::{
    ValidatingAdmissionPolicy, ValidatingAdmissionPolicyBinding,
};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{Container, Namespace, Secret, Service, ServiceAccount};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::api::rbac::v1::{
    ClusterRole, ClusterRoleBinding, PolicyRule, Role, RoleBinding, Subject,
};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value as Json;

use crate::support::json::{self, Difference};

/// The namespace the operator is installed into.
const NAMESPACE: &str = "boxtable-system";
/// The operator's ServiceAccount, Deployment, ClusterRole and leader-election Lease.
const OPERATOR: &str = "boxtable-operator";
/// The port the operator serves /metrics, /healthz and /readyz on.
const METRICS_PORT: i32 = 8080;

/// One RBAC grant the operator needs, and the call that needs it.
struct Grant {
    group: &'static str,
    resource: &'static str,
    /// Empty: any object of the resource.
    names: &'static [&'static str],
    verbs: &'static [&'static str],
}

/// Everything the ClusterRole may grant: the operator's calls across all watched namespaces.
const CLUSTER_GRANTS: &[Grant] = &[
    // get: the controller's reflector reads a BoxTable after a watch event and before patching
    // list, watch: Controller::new(Api::<BoxTable>::all(..)) lists, then watches BoxTables
    // patch: kube::runtime::finalizer adds and removes brighter.dev/cleanup with a JSON patch
    Grant {
        group: "brighter.dev",
        resource: "boxtables",
        names: &[],
        verbs: &["get", "list", "watch", "patch"],
    },
    // patch: status is written with server-side apply (Api::patch_status, Patch::Apply)
    Grant {
        group: "brighter.dev",
        resource: "boxtables/status",
        names: &[],
        verbs: &["patch"],
    },
    // list: read the referenced Secret with fieldSelector metadata.name=<name> (and the label
    // selector), so that an unselected Secret's data is never sent; no get on Secrets at all
    // list, watch: the metadata-only watch of Secrets, so a rotated password triggers a reconcile
    // patch: add and remove drop.brighter.dev/<uid> on the Secret a Drop BoxTable needs
    // (a metadata-only merge patch of metadata.finalizers), so deleting the namespace waits
    Grant {
        group: "",
        resource: "secrets",
        names: &[],
        verbs: &["list", "watch", "patch"],
    },
    // create: an events.k8s.io/v1 Event on each transition (never updated afterwards)
    Grant {
        group: "events.k8s.io",
        resource: "events",
        names: &[],
        verbs: &["create"],
    },
];

/// Everything the leader-election Role may grant, in the operator's own namespace only.
const LEADER_ELECTION_GRANTS: &[Grant] = &[
    // create: the first replica creates the Lease; create cannot be restricted by resourceNames
    Grant {
        group: "coordination.k8s.io",
        resource: "leases",
        names: &[],
        verbs: &["create"],
    },
    // get: read the holder and renew time of the boxtable-operator Lease
    // update: renew it, or take it over once expired (optimistic concurrency on resourceVersion)
    Grant {
        group: "coordination.k8s.io",
        resource: "leases",
        names: &[OPERATOR],
        verbs: &["get", "update"],
    },
];

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn kubectl() -> String {
    let kubectl = crate::support::control_plane::kubectl_for_kustomize()
        .to_string_lossy()
        .into_owned();
    match Command::new(&kubectl)
        .args(["version", "--client"])
        .output()
    {
        Ok(out) if out.status.success() => kubectl,
        Ok(out) => panic!(
            "`{kubectl} version --client` failed: {}",
            String::from_utf8_lossy(&out.stderr)
        ),
        Err(e) => panic!(
            "these tests render deploy/ with `kubectl kustomize`, but `{kubectl}` cannot be run \
             ({e}); install kubectl 1.27 or newer (https://kubernetes.io/docs/tasks/tools/, or \
             the `kubectl` package from the Kubernetes apt repository) and put it on PATH, or \
             set KUBECTL to its path"
        ),
    }
}

/// Renders a kustomization directory into its objects.
fn render(dir: &Path) -> Vec<Json> {
    let out = Command::new(kubectl())
        .arg("kustomize")
        .arg(dir)
        .output()
        .unwrap_or_else(|e| panic!("running kubectl kustomize {}: {e}", dir.display()));
    assert!(
        out.status.success(),
        "kubectl kustomize {} failed:\n{}",
        dir.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).expect("kustomize output is UTF-8");
    serde_saphyr::from_multiple(&text).expect("kustomize output is YAML")
}

/// The objects of `deploy/`, as `kubectl apply -k deploy/` would send them.
fn deploy() -> Vec<Json> {
    let crd = root().join("crds/boxtable.yaml");
    assert!(
        crd.is_file(),
        "{} is missing: deploy/ installs the generated CRD from it; generate it with \
         `UPDATE_GOLDEN=1 cargo test --test suite -- crd_golden::`",
        crd.display()
    );
    render(&root().join("deploy"))
}

fn kind_of(object: &Json) -> (&str, &str) {
    (
        object["apiVersion"].as_str().unwrap_or_default(),
        object["kind"].as_str().unwrap_or_default(),
    )
}

/// The one object of type `T` in `objects`.
fn only<T: k8s_openapi::Resource + DeserializeOwned>(objects: &[Json]) -> T {
    let mut found: Vec<T> = all(objects);
    assert_eq!(found.len(), 1, "expected exactly one {}", T::KIND);
    found.remove(0)
}

fn all<T: k8s_openapi::Resource + DeserializeOwned>(objects: &[Json]) -> Vec<T> {
    objects
        .iter()
        .filter(|object| kind_of(object) == (T::API_VERSION, T::KIND))
        .map(|object| {
            serde_json::from_value(object.clone())
                .unwrap_or_else(|e| panic!("{} does not match its schema: {e}", T::KIND))
        })
        .collect()
}

/// Deserializes `object` into `T` and serializes it back; any field the type does not know, or
/// any value it reads differently, is a difference.
fn schema_differences<T: DeserializeOwned + Serialize>(object: &Json) -> Vec<String> {
    let typed: T = match serde_json::from_value(object.clone()) {
        Ok(typed) => typed,
        Err(e) => return vec![format!("does not deserialize: {e}")],
    };
    let round_trip = serde_json::to_value(&typed).expect("typed object serializes");
    // Numbers compare by value: a schema's `minimum: 0` comes back as `0.0`.
    let described = |(path, difference): (String, Difference)| match difference {
        Difference::OnlyInFirst => format!("{path}: unknown field, dropped by the schema"),
        Difference::OnlyInSecond => format!("{path}: added by the schema"),
        Difference::Changed(a, b) => format!("{path}: {a} became {b}"),
    };
    json::differences("", object, &round_trip)
        .into_iter()
        .map(described)
        .collect()
}

fn expand(grants: &[Grant]) -> BTreeSet<(String, String, String, String)> {
    let mut atoms = BTreeSet::new();
    for grant in grants {
        let names: Vec<&str> = if grant.names.is_empty() {
            vec!["<any>"]
        } else {
            grant.names.to_vec()
        };
        for name in names {
            for verb in grant.verbs {
                atoms.insert((
                    grant.group.to_owned(),
                    grant.resource.to_owned(),
                    name.to_owned(),
                    (*verb).to_owned(),
                ));
            }
        }
    }
    atoms
}

/// Every (group, resource, name, verb) a set of rules allows.
fn expand_rules(rules: &[PolicyRule]) -> BTreeSet<(String, String, String, String)> {
    let mut atoms = BTreeSet::new();
    for rule in rules {
        assert!(
            rule.non_resource_urls.is_none(),
            "non-resource URLs are not needed: {rule:?}"
        );
        let names = match &rule.resource_names {
            Some(names) if !names.is_empty() => names.clone(),
            _ => vec!["<any>".to_owned()],
        };
        for group in rule.api_groups.iter().flatten() {
            for resource in rule.resources.iter().flatten() {
                for name in &names {
                    for verb in &rule.verbs {
                        atoms.insert((group.clone(), resource.clone(), name.clone(), verb.clone()));
                    }
                }
            }
        }
    }
    atoms
}

/// The (kind, name, namespace) of each of a binding's `subjects`.
fn subjects_of(subjects: Option<Vec<Subject>>) -> Vec<(String, String, Option<String>)> {
    subjects
        .unwrap_or_default()
        .into_iter()
        .map(|s| (s.kind, s.name, s.namespace))
        .collect()
}

/// Asserts that `rules` (none when absent) grant exactly `expected`, naming what differs.
fn assert_grants(what: &str, rules: &Option<Vec<PolicyRule>>, expected: &[Grant]) {
    let granted = expand_rules(rules.as_deref().unwrap_or_default());
    let expected = expand(expected);
    let extra: Vec<_> = granted.difference(&expected).collect();
    let missing: Vec<_> = expected.difference(&granted).collect();
    assert!(
        extra.is_empty() && missing.is_empty(),
        "{what} grants more than the operator uses: {extra:?}\n{what} lacks: {missing:?}"
    );
}

fn operator_container(deployment: &Deployment) -> Container {
    let spec = deployment.spec.as_ref().expect("deployment spec");
    let pod = spec.template.spec.as_ref().expect("pod spec");
    assert_eq!(pod.containers.len(), 1, "one container");
    pod.containers[0].clone()
}

#[test]
fn every_rendered_object_matches_its_kubernetes_schema_exactly() {
    let objects = deploy();
    let mut kinds = BTreeSet::new();
    let mut failures = Vec::new();
    for object in &objects {
        let (api_version, kind) = kind_of(object);
        let name = object["metadata"]["name"].as_str().unwrap_or_default();
        let found = match (api_version, kind) {
            ("apps/v1", "Deployment") => schema_differences::<Deployment>(object),
            ("policy/v1", "PodDisruptionBudget") => {
                schema_differences::<PodDisruptionBudget>(object)
            }
            ("v1", "ServiceAccount") => schema_differences::<ServiceAccount>(object),
            ("v1", "Service") => schema_differences::<Service>(object),
            ("v1", "Namespace") => schema_differences::<Namespace>(object),
            ("rbac.authorization.k8s.io/v1", "ClusterRole") => {
                schema_differences::<ClusterRole>(object)
            }
            ("rbac.authorization.k8s.io/v1", "ClusterRoleBinding") => {
                schema_differences::<ClusterRoleBinding>(object)
            }
            ("rbac.authorization.k8s.io/v1", "Role") => schema_differences::<Role>(object),
            ("rbac.authorization.k8s.io/v1", "RoleBinding") => {
                schema_differences::<RoleBinding>(object)
            }
            ("apiextensions.k8s.io/v1", "CustomResourceDefinition") => {
                schema_differences::<CustomResourceDefinition>(object)
            }
            ("admissionregistration.k8s.io/v1", "ValidatingAdmissionPolicy") => {
                schema_differences::<ValidatingAdmissionPolicy>(object)
            }
            ("admissionregistration.k8s.io/v1", "ValidatingAdmissionPolicyBinding") => {
                schema_differences::<ValidatingAdmissionPolicyBinding>(object)
            }
            _ => vec!["no schema known for this kind".to_owned()],
        };
        failures.extend(
            found
                .into_iter()
                .map(|f| format!("{api_version} {kind} {name}: {f}")),
        );
        kinds.insert(kind.to_owned());
    }
    assert!(failures.is_empty(), "\n{}", failures.join("\n"));
    let expected: BTreeSet<String> = [
        "ClusterRole",
        "ClusterRoleBinding",
        "CustomResourceDefinition",
        "Deployment",
        "Namespace",
        "PodDisruptionBudget",
        "Role",
        "RoleBinding",
        "Service",
        "ServiceAccount",
        "ValidatingAdmissionPolicy",
        "ValidatingAdmissionPolicyBinding",
    ]
    .into_iter()
    .map(str::to_owned)
    .collect();
    assert_eq!(kinds, expected);
}

#[test]
fn the_schema_check_catches_a_misspelled_field() {
    let objects = deploy();
    let mut deployment = objects
        .iter()
        .find(|object| kind_of(object) == ("apps/v1", "Deployment"))
        .expect("a Deployment")
        .clone();
    deployment["spec"]["template"]["spec"]["containers"][0]["securityContext"]["readOnlyRootFileSystem"] =
        Json::Bool(true);
    let found = schema_differences::<Deployment>(&deployment);
    assert_eq!(
        found,
        vec![
            ".spec.template.spec.containers[0].securityContext.readOnlyRootFileSystem: \
             unknown field, dropped by the schema"
                .to_owned()
        ]
    );
}

#[test]
fn every_namespaced_object_lands_in_the_operator_namespace() {
    const CLUSTER_SCOPED: [&str; 6] = [
        "Namespace",
        "ClusterRole",
        "ClusterRoleBinding",
        "CustomResourceDefinition",
        "ValidatingAdmissionPolicy",
        "ValidatingAdmissionPolicyBinding",
    ];
    for object in deploy() {
        let (_, kind) = kind_of(&object);
        let namespace = object["metadata"]["namespace"].as_str();
        if CLUSTER_SCOPED.contains(&kind) {
            assert_eq!(namespace, None, "{kind} is cluster-scoped");
        } else {
            assert_eq!(namespace, Some(NAMESPACE), "{kind} namespace");
        }
    }
    let namespace: Namespace = only(&deploy());
    assert_eq!(namespace.metadata.name.as_deref(), Some(NAMESPACE));
}

#[test]
fn the_namespace_enforces_the_restricted_pod_security_standard() {
    let namespace: Namespace = only(&deploy());
    let labels = namespace.metadata.labels.expect("namespace labels");
    assert_eq!(
        labels
            .get("pod-security.kubernetes.io/enforce")
            .map(String::as_str),
        Some("restricted")
    );
}

#[test]
fn the_deployment_runs_non_root_with_a_read_only_root_filesystem_and_no_capabilities() {
    let deployment: Deployment = only(&deploy());
    let pod = deployment
        .spec
        .as_ref()
        .and_then(|spec| spec.template.spec.as_ref())
        .expect("pod spec");
    let pod_security = pod.security_context.as_ref().expect("pod securityContext");
    assert_eq!(pod_security.run_as_non_root, Some(true));
    assert_eq!(pod_security.run_as_user, Some(65532));
    assert_eq!(
        pod_security
            .seccomp_profile
            .as_ref()
            .map(|profile| profile.type_.as_str()),
        Some("RuntimeDefault")
    );

    let container = operator_container(&deployment);
    let security = container
        .security_context
        .expect("container securityContext");
    assert_eq!(security.run_as_non_root, Some(true));
    assert_eq!(security.run_as_user, Some(65532));
    assert_eq!(security.read_only_root_filesystem, Some(true));
    assert_eq!(security.allow_privilege_escalation, Some(false));
    assert_eq!(security.privileged, None, "never privileged");
    let capabilities = security.capabilities.expect("capabilities");
    assert_eq!(capabilities.drop, Some(vec!["ALL".to_owned()]));
    assert_eq!(capabilities.add, None, "no capability added back");
    assert_eq!(
        security.seccomp_profile.map(|profile| profile.type_),
        Some("RuntimeDefault".to_owned())
    );
    assert_eq!(pod.host_network, None);
    assert_eq!(pod.host_pid, None);
}

#[test]
fn the_deployment_probes_healthz_and_readyz_on_the_metrics_port() {
    let container = operator_container(&only(&deploy()));
    let ports = container.ports.expect("container ports");
    assert!(
        ports
            .iter()
            .any(|port| port.name.as_deref() == Some("metrics")
                && port.container_port == METRICS_PORT),
        "port {METRICS_PORT} named metrics: {ports:?}"
    );
    for (probe, path) in [
        (container.liveness_probe, "/healthz"),
        (container.readiness_probe, "/readyz"),
    ] {
        let get = probe
            .and_then(|probe| probe.http_get)
            .unwrap_or_else(|| panic!("an HTTP probe on {path}"));
        assert_eq!(get.path.as_deref(), Some(path));
        assert!(
            matches!(&get.port, IntOrString::String(name) if name == "metrics")
                || get.port == IntOrString::Int(METRICS_PORT),
            "{path} probe port {:?}",
            get.port
        );
    }
}

#[test]
fn the_deployment_sets_cpu_and_memory_requests_and_limits() {
    let container = operator_container(&only(&deploy()));
    let resources = container.resources.expect("resources");
    for (what, set) in [
        ("requests", resources.requests),
        ("limits", resources.limits),
    ] {
        let set = set.unwrap_or_else(|| panic!("no {what}"));
        for resource in ["cpu", "memory"] {
            assert!(set.contains_key(resource), "no {resource} {what}");
        }
    }
}

#[test]
fn the_deployment_passes_pod_name_and_namespace_from_the_downward_api() {
    let container = operator_container(&only(&deploy()));
    let env = container.env.expect("env");
    for (variable, field) in [
        ("POD_NAME", "metadata.name"),
        ("POD_NAMESPACE", "metadata.namespace"),
    ] {
        let source = env
            .iter()
            .find(|var| var.name == variable)
            .and_then(|var| var.value_from.as_ref())
            .and_then(|from| from.field_ref.as_ref())
            .unwrap_or_else(|| panic!("{variable} from a fieldRef"));
        assert_eq!(source.field_path, field, "{variable}");
    }
}

#[test]
fn the_deployment_sets_rust_log_to_the_binarys_default_filter_as_the_docs_say() {
    let default = boxtable_operator::telemetry::DEFAULT_LOG_FILTER;
    let container = operator_container(&only(&deploy()));
    let env = container.env.expect("env");
    let rust_log = env
        .iter()
        .find(|var| var.name == "RUST_LOG")
        .and_then(|var| var.value.as_deref());
    assert_eq!(rust_log, Some(default));
    // The chart's default and dist/install.yaml render this Deployment (helm_chart and
    // install_bundle compare them); the documentation names the same value.
    for (doc, says) in [
        ("README.md", format!("(default `{default}`)")),
        ("README.md", format!("| `json`, `{default}` |")),
        ("deploy/README.md", format!("`{default}`")),
        (
            "charts/boxtable-operator/README.md",
            format!("| `{default}` |"),
        ),
    ] {
        let text = std::fs::read_to_string(root().join(doc)).unwrap();
        assert!(text.contains(&says), "{doc} does not say {says}");
    }
}

#[test]
fn the_deployment_runs_two_leader_elected_replicas_that_roll_one_at_a_time() {
    let deployment: Deployment = only(&deploy());
    let spec = deployment.spec.as_ref().expect("deployment spec");
    assert_eq!(spec.replicas, Some(2), "a leader and a ready standby");
    let strategy = spec.strategy.as_ref().expect("a strategy");
    assert_eq!(strategy.type_.as_deref(), Some("RollingUpdate"));
    let rolling = strategy.rolling_update.as_ref().expect("rollingUpdate");
    assert_eq!(rolling.max_surge, Some(IntOrString::Int(1)));
    assert_eq!(
        rolling.max_unavailable,
        Some(IntOrString::Int(0)),
        "a new pod is ready before an old one stops"
    );
    let pod = spec.template.spec.as_ref().expect("pod spec");
    assert!(
        pod.termination_grace_period_seconds.unwrap_or(30) >= 60,
        "time to cancel and roll back a running migration"
    );
    assert_eq!(pod.automount_service_account_token, Some(true));
    let account: ServiceAccount = only(&deploy());
    assert_eq!(pod.service_account_name, account.metadata.name);

    let container = operator_container(&deployment);
    let args = container.args.expect("args");
    assert_eq!(args.first().map(String::as_str), Some("run"));
    assert!(
        args.iter().any(|arg| arg == "--leader-election"),
        "{args:?}"
    );
    assert!(
        args.iter()
            .any(|arg| arg == &format!("--metrics-addr=0.0.0.0:{METRICS_PORT}")),
        "{args:?}"
    );
}

/// The ClusterRole named `name`.
fn cluster_role(objects: &[Json], name: &str) -> ClusterRole {
    all::<ClusterRole>(objects)
        .into_iter()
        .find(|role| role.metadata.name.as_deref() == Some(name))
        .unwrap_or_else(|| panic!("no ClusterRole {name}"))
}

#[test]
fn a_disruption_budget_keeps_all_but_one_operator_pod_through_drains() {
    let objects = deploy();
    let deployment: Deployment = only(&objects);
    let budget: PodDisruptionBudget = only(&objects);
    let spec = budget.spec.expect("pdb spec");
    assert_eq!(spec.max_unavailable, Some(IntOrString::Int(1)));
    assert_eq!(spec.min_available, None);
    let pods = deployment
        .spec
        .expect("deployment spec")
        .selector
        .match_labels;
    assert_eq!(
        spec.selector.and_then(|s| s.match_labels),
        pods,
        "the budget covers the operator's pods"
    );
}

#[test]
fn the_cluster_role_grants_exactly_the_calls_the_operator_makes() {
    let role = cluster_role(&deploy(), OPERATOR);
    assert!(role.aggregation_rule.is_none());
    assert_grants("ClusterRole", &role.rules, CLUSTER_GRANTS);
}

#[test]
fn boxtables_aggregate_into_the_built_in_admin_edit_and_view_roles() {
    let objects = deploy();
    let edit = cluster_role(&objects, "boxtable-operator-edit");
    let view = cluster_role(&objects, "boxtable-operator-view");
    let labels = |role: &ClusterRole| role.metadata.labels.clone().unwrap_or_default();
    for to in ["admin", "edit"] {
        assert_eq!(
            labels(&edit)
                .get(&format!("rbac.authorization.k8s.io/aggregate-to-{to}"))
                .map(String::as_str),
            Some("true")
        );
    }
    assert_eq!(
        labels(&view)
            .get("rbac.authorization.k8s.io/aggregate-to-view")
            .map(String::as_str),
        Some("true")
    );
    let grants = |role: &ClusterRole| expand_rules(role.rules.as_deref().unwrap_or_default());
    let all_verbs = [
        "get",
        "list",
        "watch",
        "create",
        "update",
        "patch",
        "delete",
        "deletecollection",
    ];
    for verb in all_verbs {
        assert!(
            grants(&edit)
                .iter()
                .any(|g| g.1 == "boxtables" && g.3 == verb),
            "edit lacks {verb}"
        );
    }
    assert!(
        grants(&view)
            .iter()
            .all(|g| ["get", "list", "watch"].contains(&g.3.as_str())),
        "view may write"
    );
    // Nothing binds them: they reach users only through the built-in roles.
    assert!(
        all::<ClusterRoleBinding>(&objects)
            .iter()
            .all(|b| !b.role_ref.name.starts_with("boxtable-operator-"))
    );
}

#[test]
fn the_leader_election_role_grants_exactly_the_lease_calls() {
    let role: Role = only(&deploy());
    assert_eq!(role.metadata.namespace.as_deref(), Some(NAMESPACE));
    assert_grants("leader-election Role", &role.rules, LEADER_ELECTION_GRANTS);
}

#[test]
fn no_rule_uses_a_wildcard() {
    let objects = deploy();
    let cluster_rules = all::<ClusterRole>(&objects)
        .into_iter()
        .flat_map(|role| role.rules.unwrap_or_default());
    let rules = all::<Role>(&objects)
        .into_iter()
        .flat_map(|role| role.rules.unwrap_or_default())
        .chain(cluster_rules);
    for rule in rules {
        let fields = [
            rule.api_groups.clone().unwrap_or_default(),
            rule.resources.clone().unwrap_or_default(),
            rule.resource_names.clone().unwrap_or_default(),
            rule.verbs.clone(),
        ];
        assert!(
            fields.iter().flatten().all(|entry| !entry.contains('*')),
            "wildcard in {rule:?}"
        );
    }
}

#[test]
fn the_bindings_give_the_roles_to_the_operator_service_account() {
    let objects = deploy();
    let account: ServiceAccount = only(&objects);
    let subject = (
        "ServiceAccount".to_owned(),
        account.metadata.name.clone().expect("account name"),
        Some(NAMESPACE.to_owned()),
    );

    let cluster_binding: ClusterRoleBinding = only(&objects);
    let cluster_role = cluster_role(&objects, OPERATOR);
    assert_eq!(cluster_binding.role_ref.kind, "ClusterRole");
    assert_eq!(
        Some(&cluster_binding.role_ref.name),
        cluster_role.metadata.name.as_ref()
    );
    let subjects = subjects_of(cluster_binding.subjects);
    assert_eq!(subjects, vec![subject.clone()]);

    let binding: RoleBinding = only(&objects);
    let role: Role = only(&objects);
    assert_eq!(binding.role_ref.kind, "Role");
    assert_eq!(Some(&binding.role_ref.name), role.metadata.name.as_ref());
    assert_eq!(binding.metadata.namespace, role.metadata.namespace);
    let subjects = subjects_of(binding.subjects);
    assert_eq!(subjects, vec![subject]);
}

/// Whether `selector` (a LabelSelector's JSON) selects an object labelled `labels`.
fn selects(selector: &Json, labels: &Json) -> bool {
    let label = |key: &str| labels[key].as_str();
    let matches_labels = selector["matchLabels"]
        .as_object()
        .into_iter()
        .flatten()
        .all(|(key, value)| label(key) == value.as_str());
    let matches_expressions = selector["matchExpressions"]
        .as_array()
        .into_iter()
        .flatten()
        .all(|e| {
            let key = e["key"].as_str().unwrap();
            let values: Vec<&str> = e["values"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(Json::as_str)
                .collect();
            match e["operator"].as_str().unwrap() {
                "In" => label(key).is_some_and(|v| values.contains(&v)),
                "NotIn" => !label(key).is_some_and(|v| values.contains(&v)),
                "Exists" => label(key).is_some(),
                "DoesNotExist" => label(key).is_none(),
                other => panic!("operator {other}"),
            }
        });
    matches_labels && matches_expressions
}

/// `Kind [namespace/]name`.
fn identity(object: &Json) -> String {
    let metadata = &object["metadata"];
    let name = metadata["name"].as_str().unwrap_or_default();
    match metadata["namespace"].as_str() {
        Some(namespace) => format!("{} {namespace}/{name}", kind_of(object).1),
        None => format!("{} {name}", kind_of(object).1),
    }
}

/// The objects of `objects` whose DELETE the uninstall guard evaluates.
fn guarded(objects: &[Json]) -> BTreeSet<String> {
    let policy: ValidatingAdmissionPolicy = only(objects);
    let policy = serde_json::to_value(policy.spec.expect("a spec")).unwrap();
    let constraints = &policy["matchConstraints"];
    let rules = constraints["resourceRules"].as_array().unwrap();
    // The API group and resource of each kind in deploy/.
    let resource = |kind: &str| match kind {
        "Namespace" => ("", "namespaces"),
        "ServiceAccount" => ("", "serviceaccounts"),
        "Service" => ("", "services"),
        "Deployment" => ("apps", "deployments"),
        "PodDisruptionBudget" => ("policy", "poddisruptionbudgets"),
        "Role" => ("rbac.authorization.k8s.io", "roles"),
        "RoleBinding" => ("rbac.authorization.k8s.io", "rolebindings"),
        "ClusterRole" => ("rbac.authorization.k8s.io", "clusterroles"),
        "ClusterRoleBinding" => ("rbac.authorization.k8s.io", "clusterrolebindings"),
        "CustomResourceDefinition" => ("apiextensions.k8s.io", "customresourcedefinitions"),
        "ValidatingAdmissionPolicy" => (
            "admissionregistration.k8s.io",
            "validatingadmissionpolicies",
        ),
        "ValidatingAdmissionPolicyBinding" => (
            "admissionregistration.k8s.io",
            "validatingadmissionpolicybindings",
        ),
        other => panic!("no resource known for {other}"),
    };
    let listed = |list: &Json, value: &str| {
        list.as_array()
            .unwrap()
            .iter()
            .any(|entry| entry.as_str() == Some(value))
    };
    objects
        .iter()
        .filter(|object| {
            let (group, plural) = resource(kind_of(object).1);
            rules.iter().any(|rule| {
                listed(&rule["apiGroups"], group)
                    && listed(&rule["resources"], plural)
                    && listed(&rule["operations"], "DELETE")
            }) && selects(
                &constraints["objectSelector"],
                &object["metadata"]["labels"],
            )
        })
        .map(identity)
        .collect()
}

#[test]
fn the_uninstall_guard_covers_exactly_what_the_operator_runs_with() {
    let objects = deploy();
    let expected: BTreeSet<String> = [
        "Namespace boxtable-system",
        "ServiceAccount boxtable-system/boxtable-operator",
        "Deployment boxtable-system/boxtable-operator",
        "ClusterRole boxtable-operator",
        "ClusterRoleBinding boxtable-operator",
        "Role boxtable-system/boxtable-operator-leader-election",
        "RoleBinding boxtable-system/boxtable-operator-leader-election",
    ]
    .into_iter()
    .map(str::to_owned)
    .collect();
    assert_eq!(guarded(&objects), expected);

    // The namespaced install's Roles and RoleBindings in the watched namespaces too.
    let namespaced = render(&root().join("examples/namespaced-install"));
    let watched: BTreeSet<String> = namespaced
        .iter()
        .filter(|o| matches!(kind_of(o).1, "Role" | "RoleBinding"))
        .filter(|o| o["metadata"]["name"] == OPERATOR)
        .map(identity)
        .collect();
    assert!(watched.len() >= 2, "{watched:?}");
    assert!(watched.is_subset(&guarded(&namespaced)), "{watched:?}");

    // A Helm release's objects are the chart's to answer for.
    let mut helm = objects.clone();
    for object in &mut helm {
        object["metadata"]["labels"]["app.kubernetes.io/managed-by"] = Json::from("Helm");
    }
    assert!(guarded(&helm).is_empty(), "{:?}", guarded(&helm));
}

#[test]
fn the_uninstall_guard_binding_reads_the_crd_and_allows_everything_without_it() {
    let objects = deploy();
    let policy: ValidatingAdmissionPolicy = only(&objects);
    let binding: ValidatingAdmissionPolicyBinding = only(&objects);
    let crd: CustomResourceDefinition = only(&objects);
    let spec = policy.spec.expect("policy spec");
    let param = spec.param_kind.expect("paramKind");
    assert_eq!(
        (param.api_version.as_deref(), param.kind.as_deref()),
        (
            Some("apiextensions.k8s.io/v1"),
            Some("CustomResourceDefinition")
        )
    );
    assert_eq!(spec.failure_policy.as_deref(), Some("Fail"));
    let binding = binding.spec.expect("binding spec");
    assert_eq!(binding.policy_name, policy.metadata.name);
    assert_eq!(binding.validation_actions, Some(vec!["Deny".to_owned()]));
    let param_ref = binding.param_ref.expect("paramRef");
    assert_eq!(param_ref.name, crd.metadata.name);
    assert_eq!(param_ref.namespace, None);
    assert_eq!(
        param_ref.parameter_not_found_action.as_deref(),
        Some("Allow")
    );
}

#[test]
fn the_metrics_service_selects_the_operator_pods_on_the_metrics_port() {
    let objects = deploy();
    let service: Service = only(&objects);
    let deployment: Deployment = only(&objects);
    let spec = service.spec.expect("service spec");
    let selector = spec.selector.expect("service selector");
    let pod_labels = deployment
        .spec
        .and_then(|spec| spec.template.metadata)
        .and_then(|metadata| metadata.labels)
        .expect("pod labels");
    for (key, value) in &selector {
        assert_eq!(pod_labels.get(key), Some(value), "selector {key}");
    }
    let ports = spec.ports.expect("service ports");
    assert!(
        ports
            .iter()
            .any(|port| port.name.as_deref() == Some("metrics")
                && port.target_port == Some(IntOrString::String("metrics".to_owned()))),
        "{ports:?}"
    );
}

#[test]
fn the_crd_is_the_namespaced_boxtable_v1alpha1_with_short_name_bt() {
    let crd: CustomResourceDefinition = only(&deploy());
    assert_eq!(crd.metadata.name.as_deref(), Some("boxtables.brighter.dev"));
    assert_eq!(crd.metadata.namespace, None);
    assert_eq!(crd.spec.group, "brighter.dev");
    assert_eq!(crd.spec.scope, "Namespaced");
    assert_eq!(crd.spec.names.kind, "BoxTable");
    assert_eq!(crd.spec.names.plural, "boxtables");
    assert_eq!(crd.spec.names.short_names, Some(vec!["bt".to_owned()]));
    let versions: Vec<_> = crd.spec.versions.iter().map(|v| v.name.as_str()).collect();
    assert!(versions.contains(&"v1alpha1"), "{versions:?}");
    let v1alpha1 = crd
        .spec
        .versions
        .iter()
        .find(|v| v.name == "v1alpha1")
        .expect("v1alpha1");
    assert!(
        v1alpha1
            .subresources
            .as_ref()
            .is_some_and(|s| s.status.is_some()),
        "status subresource (the operator patches boxtables/status)"
    );
}

/// `deploy/` with `components` (paths from the repository root), rendered through an overlay.
fn render_with(components: &[&str]) -> Vec<Json> {
    // kustomize accepts only relative paths, so the overlay climbs from its temporary folder.
    let overlay = tempfile::tempdir().expect("temporary overlay");
    let up = "../".repeat(overlay.path().components().count() - 1);
    let from_root = |path: &str| {
        let absolute = root().join(path);
        format!("{up}{}", absolute.to_string_lossy().trim_start_matches('/'))
    };
    let components: String = components
        .iter()
        .map(|c| format!("  - {}\n", from_root(c)))
        .collect();
    let kustomization = format!(
        "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\n\
         resources:\n  - {}\ncomponents:\n{components}",
        from_root("deploy"),
    );
    fs::write(overlay.path().join("kustomization.yaml"), kustomization).expect("write overlay");
    render(overlay.path())
}

#[test]
fn the_servicemonitor_component_scrapes_the_metrics_service() {
    let objects = render_with(&["deploy/components/servicemonitor"]);

    let monitors: Vec<&Json> = objects
        .iter()
        .filter(|object| kind_of(object) == ("monitoring.coreos.com/v1", "ServiceMonitor"))
        .collect();
    assert_eq!(monitors.len(), 1, "one ServiceMonitor");
    let monitor = monitors[0];
    assert_eq!(monitor["metadata"]["namespace"], NAMESPACE);

    let service: Service = only(&objects);
    let service_labels = service.metadata.labels.expect("service labels");
    let selector = monitor["spec"]["selector"]["matchLabels"]
        .as_object()
        .expect("matchLabels");
    for (key, value) in selector {
        assert_eq!(
            service_labels.get(key).map(String::as_str),
            value.as_str(),
            "ServiceMonitor selects {key}"
        );
    }
    let endpoint = &monitor["spec"]["endpoints"][0];
    assert_eq!(endpoint["port"], "metrics");
    assert_eq!(endpoint["path"], "/metrics");
}

/// What the ClusterRole of `components/secure-metrics` may grant: the reviews of `/metrics`
/// callers that `--metrics-secure` makes.
const METRICS_AUTH_GRANTS: &[Grant] = &[
    // create: a TokenReview of each new caller's bearer token (who is it?)
    Grant {
        group: "authentication.k8s.io",
        resource: "tokenreviews",
        names: &[],
        verbs: &["create"],
    },
    // create: a SubjectAccessReview of that user for get on the non-resource URL /metrics
    Grant {
        group: "authorization.k8s.io",
        resource: "subjectaccessreviews",
        names: &[],
        verbs: &["create"],
    },
];

fn is_secure(container: &Container) -> bool {
    container
        .args
        .iter()
        .flatten()
        .any(|a| a == "--metrics-secure")
}

#[test]
fn secure_metrics_add_the_flag_https_probes_and_exactly_the_review_grants_and_only_with_the_component()
 {
    let base = deploy();
    assert!(!is_secure(&operator_container(&only(&base))));
    assert!(
        all::<ClusterRole>(&base).iter().all(|r| !r
            .metadata
            .name
            .as_deref()
            .unwrap_or_default()
            .contains("metrics")),
        "no metrics roles without the component"
    );

    let objects = render(&root().join("examples/secure-metrics"));
    for object in &objects {
        let found = match kind_of(object) {
            ("apps/v1", "Deployment") => schema_differences::<Deployment>(object),
            ("rbac.authorization.k8s.io/v1", "ClusterRole") => {
                schema_differences::<ClusterRole>(object)
            }
            ("rbac.authorization.k8s.io/v1", "ClusterRoleBinding") => {
                schema_differences::<ClusterRoleBinding>(object)
            }
            _ => Vec::new(),
        };
        assert!(
            found.is_empty(),
            "{}: {found:?}",
            object["metadata"]["name"]
        );
    }
    let container = operator_container(&only(&objects));
    assert!(is_secure(&container), "{:?}", container.args);
    for probe in [&container.liveness_probe, &container.readiness_probe] {
        let get = probe.as_ref().and_then(|p| p.http_get.as_ref()).unwrap();
        assert_eq!(get.scheme.as_deref(), Some("HTTPS"), "{get:?}");
    }

    let auth = cluster_role(&objects, "boxtable-operator-metrics-auth");
    assert_grants(
        "ClusterRole boxtable-operator-metrics-auth",
        &auth.rules,
        METRICS_AUTH_GRANTS,
    );
    let binding = all::<ClusterRoleBinding>(&objects)
        .into_iter()
        .find(|b| b.role_ref.name == "boxtable-operator-metrics-auth")
        .expect("a binding of the metrics-auth role");
    let subjects = subjects_of(binding.subjects);
    assert_eq!(
        subjects,
        [(
            "ServiceAccount".to_owned(),
            OPERATOR.to_owned(),
            Some(NAMESPACE.to_owned())
        )]
    );
    // The operator's own ClusterRole is unchanged.
    assert_grants(
        "ClusterRole",
        &cluster_role(&objects, OPERATOR).rules,
        CLUSTER_GRANTS,
    );

    let reader = cluster_role(&objects, "boxtable-operator-metrics-reader");
    let rules = reader.rules.unwrap_or_default();
    assert_eq!(rules.len(), 1, "{rules:?}");
    assert_eq!(
        rules[0].non_resource_urls.as_deref(),
        Some(&["/metrics".to_owned()][..])
    );
    assert_eq!(rules[0].verbs, ["get"]);
    assert!(rules[0].resources.is_none() && rules[0].api_groups.is_none());
    assert!(
        !all::<ClusterRoleBinding>(&objects)
            .iter()
            .any(|b| b.role_ref.name == "boxtable-operator-metrics-reader"),
        "the reader role is for users to bind"
    );
}

#[test]
fn with_secure_metrics_the_servicemonitor_scrapes_over_https_with_prometheus_token() {
    let objects = render_with(&[
        "deploy/components/servicemonitor",
        "deploy/components/secure-metrics",
    ]);
    let monitor = objects
        .iter()
        .find(|o| kind_of(o) == ("monitoring.coreos.com/v1", "ServiceMonitor"))
        .expect("a ServiceMonitor");
    let endpoint = &monitor["spec"]["endpoints"][0];
    assert_eq!(endpoint["port"], "metrics");
    assert_eq!(endpoint["scheme"], "https");
    assert_eq!(
        endpoint["bearerTokenFile"],
        "/var/run/secrets/kubernetes.io/serviceaccount/token"
    );
    assert_eq!(endpoint["tlsConfig"]["insecureSkipVerify"], true);

    let plain = render_with(&["deploy/components/servicemonitor"]);
    let endpoint = &plain
        .iter()
        .find(|o| kind_of(o) == ("monitoring.coreos.com/v1", "ServiceMonitor"))
        .unwrap()["spec"]["endpoints"][0];
    assert!(endpoint.get("scheme").is_none() && endpoint.get("bearerTokenFile").is_none());
}

/// The objects of `examples/`, in the order `kubectl apply -f examples/` sends them (file name
/// order, so the namespace and the Secret come first).
fn examples() -> Vec<Json> {
    let dir = root().join("examples");
    let mut files: Vec<_> = fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("reading {}: {e}", dir.display()))
        .map(|entry| entry.unwrap().path())
        .filter(|path| path.extension().is_some_and(|e| e == "yaml"))
        .collect();
    files.sort();
    files
        .iter()
        .flat_map(|path| {
            let text = fs::read_to_string(path).unwrap();
            serde_saphyr::from_multiple::<Json>(&text).expect("example is YAML")
        })
        .collect()
}

/// The generated CRD's schema for `spec` of v1alpha1.
fn boxtable_spec_schema() -> Json {
    let path = root().join("crds/boxtable.yaml");
    let text =
        fs::read_to_string(&path).unwrap_or_else(|e| panic!("reading {}: {e}", path.display()));
    let crd: Json = serde_saphyr::from_str(&text).expect("crds/boxtable.yaml is YAML");
    crd["spec"]["versions"]
        .as_array()
        .expect("CRD versions")
        .iter()
        .find(|version| version["name"] == "v1alpha1")
        .expect("v1alpha1 in the CRD")["schema"]["openAPIV3Schema"]["properties"]["spec"]
        .clone()
}

/// Checks `value` against a structural schema the way the API server would before CEL and
/// patterns: types, enums, required fields, bounds, and no field the schema does not define.
fn schema_violations(path: &str, schema: &Json, value: &Json, out: &mut Vec<String>) {
    if value.is_null() && schema["nullable"] == true {
        return;
    }
    let type_ok = match schema["type"].as_str() {
        Some("object") => value.is_object(),
        Some("array") => value.is_array(),
        Some("string") => value.is_string(),
        Some("integer") => value.is_i64() || value.is_u64(),
        Some("number") => value.is_number(),
        Some("boolean") => value.is_boolean(),
        _ => true,
    };
    if !type_ok {
        out.push(format!("{path}: {value} is not of type {}", schema["type"]));
        return;
    }
    if let Some(allowed) = schema["enum"].as_array()
        && !allowed.contains(value)
    {
        out.push(format!("{path}: {value} is not one of {allowed:?}"));
    }
    if let Some(number) = value.as_f64() {
        if schema["minimum"].as_f64().is_some_and(|min| number < min) {
            out.push(format!("{path}: {number} is below {}", schema["minimum"]));
        }
        if schema["maximum"].as_f64().is_some_and(|max| number > max) {
            out.push(format!("{path}: {number} is above {}", schema["maximum"]));
        }
    }
    if let Some(text) = value.as_str() {
        let length = text.chars().count() as u64;
        if schema["minLength"].as_u64().is_some_and(|min| length < min)
            || schema["maxLength"].as_u64().is_some_and(|max| length > max)
        {
            out.push(format!("{path}: length of {text:?} is out of bounds"));
        }
    }
    if let Some(fields) = value.as_object() {
        for required in schema["required"].as_array().into_iter().flatten() {
            let name = required.as_str().unwrap_or_default();
            if !fields.contains_key(name) {
                out.push(format!("{path}.{name}: required"));
            }
        }
        let properties = schema["properties"].as_object();
        for (name, field) in fields {
            match properties.and_then(|properties| properties.get(name)) {
                Some(field_schema) => {
                    schema_violations(&format!("{path}.{name}"), field_schema, field, out);
                }
                None if schema["x-kubernetes-preserve-unknown-fields"] == true => {}
                None => out.push(format!("{path}.{name}: not in the CRD (would be pruned)")),
            }
        }
    }
    if let (Some(items), Some(schema)) = (value.as_array(), schema.get("items")) {
        for (index, item) in items.iter().enumerate() {
            schema_violations(&format!("{path}[{index}]"), schema, item, out);
        }
    }
}

fn boxtables(objects: &[Json]) -> Vec<&Json> {
    objects
        .iter()
        .filter(|object| kind_of(object) == ("brighter.dev/v1alpha1", "BoxTable"))
        .collect()
}

#[test]
fn every_example_boxtable_validates_against_the_generated_crd() {
    let schema = boxtable_spec_schema();
    let objects = examples();
    let tables = boxtables(&objects);
    assert!(!tables.is_empty(), "examples/ holds BoxTables");
    let mut failures = Vec::new();
    for table in tables {
        let name = table["metadata"]["name"].as_str().unwrap_or_default();
        let mut found = Vec::new();
        schema_violations(".spec", &schema, &table["spec"], &mut found);
        failures.extend(found.into_iter().map(|f| format!("{name}: {f}")));
    }
    assert!(failures.is_empty(), "\n{}", failures.join("\n"));
}

#[test]
fn the_example_validator_rejects_a_misspelled_field_and_a_bad_enum() {
    let schema = boxtable_spec_schema();
    let objects = examples();
    let mut spec = boxtables(&objects)[0]["spec"].clone();
    spec["deletionPolcy"] = Json::from("Drop");
    spec["box"] = Json::from("Sidebox");
    let mut found = Vec::new();
    schema_violations(".spec", &schema, &spec, &mut found);
    assert_eq!(found.len(), 2, "{found:?}");
    assert!(found.iter().any(|f| f.starts_with(".spec.deletionPolcy:")));
    assert!(found.iter().any(|f| f.starts_with(".spec.box:")));
}

#[test]
fn the_examples_are_the_documented_tables_in_the_shop_namespace() {
    let objects = examples();
    let mut described: Vec<(String, String, String)> = boxtables(&objects)
        .iter()
        .map(|table| {
            let spec = &table["spec"];
            (
                table["metadata"]["name"]
                    .as_str()
                    .unwrap_or_default()
                    .to_owned(),
                spec["box"].as_str().unwrap_or_default().to_owned(),
                format!(
                    "{}.{}",
                    spec["schema"].as_str().unwrap_or("public"),
                    spec["table"].as_str().unwrap_or_default()
                ),
            )
        })
        .collect();
    described.sort();
    let expected = [
        ("billing-outbox", "Outbox", "billing.Outbox"),
        ("orders-inbox", "Inbox", "public.Inbox"),
        ("orders-outbox", "Outbox", "public.Outbox"),
        ("scratch-outbox", "Outbox", "public.scratch_outbox"),
    ]
    .map(|(a, b, c)| (a.to_owned(), b.to_owned(), c.to_owned()));
    assert_eq!(described, expected);
    for object in &objects {
        let (_, kind) = kind_of(object);
        if kind != "Namespace" {
            assert_eq!(object["metadata"]["namespace"], "shop", "{kind}");
        }
    }
    let namespace: Namespace = only(&objects);
    assert_eq!(namespace.metadata.name.as_deref(), Some("shop"));
}

#[test]
fn the_example_boxtables_read_a_key_the_example_secret_has() {
    let objects = examples();
    let secret: Secret = only(&objects);
    let secret_object = objects
        .iter()
        .find(|object| kind_of(object) == ("v1", "Secret"))
        .expect("a Secret");
    assert_eq!(
        schema_differences::<Secret>(secret_object),
        Vec::<String>::new()
    );
    let keys = secret.string_data.expect("stringData");
    assert!(
        keys.get("connectionString")
            .is_some_and(|value| value.contains("Host=postgres.shop.svc")),
        "an Npgsql connection string for postgres.shop.svc"
    );
    for table in boxtables(&objects) {
        let reference = &table["spec"]["database"]["secretRef"];
        assert_eq!(reference["name"].as_str(), secret.metadata.name.as_deref());
        let key = reference["key"].as_str().unwrap_or("connectionString");
        assert!(
            keys.contains_key(key),
            "{} reads key {key}",
            table["metadata"]["name"]
        );
    }
}
