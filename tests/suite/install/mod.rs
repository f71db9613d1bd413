//! Installing the operator: `deploy/`, the Helm chart, the one-file bundle, the image, the Job
//! examples, the namespaced install, and the release workflow.

mod bundle;
mod deploy_manifests;
pub(crate) mod helm_chart;
mod image;
mod jobs_examples;
mod manifests_on_the_server;
mod namespaced;
mod release_workflow;
