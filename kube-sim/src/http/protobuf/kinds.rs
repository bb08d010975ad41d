//! The kinds `kubectl create` sends in protobuf, from their k8s-pb messages to JSON. Every
//! message is destructured without `..`, so the compiler proves that each field is either
//! converted or checked empty (and refused otherwise, see `json::unconverted`). Status is
//! never converted: a create ignores it, so it is only checked empty.

use k8s_pb::api::apps::v1::{
    Deployment, DeploymentSpec, DeploymentStatus, DeploymentStrategy, RollingUpdateDeployment,
};
use k8s_pb::api::batch::v1::{
    CronJob, CronJobSpec, CronJobStatus, Job, JobSpec, JobStatus, JobTemplateSpec,
};
use k8s_pb::api::core::v1::{
    ClientIpConfig, ConfigMap, LoadBalancerStatus, Namespace, NamespaceSpec, NamespaceStatus,
    ObjectReference, ResourceQuota, ResourceQuotaSpec, ResourceQuotaStatus, ScopeSelector,
    ScopedResourceSelectorRequirement, Secret, Service, ServiceAccount, ServicePort, ServiceSpec,
    ServiceStatus, SessionAffinityConfig, TypedLocalObjectReference,
};
use k8s_pb::api::networking::v1::{
    HttpIngressPath, HttpIngressRuleValue, Ingress, IngressBackend, IngressLoadBalancerStatus,
    IngressRule, IngressRuleValue, IngressServiceBackend, IngressSpec, IngressStatus, IngressTls,
    ServiceBackendPort,
};
use k8s_pb::api::policy::v1::{
    PodDisruptionBudget, PodDisruptionBudgetSpec, PodDisruptionBudgetStatus,
};
use k8s_pb::api::rbac::v1::{
    AggregationRule, ClusterRole, ClusterRoleBinding, PolicyRule, Role, RoleBinding, RoleRef,
    Subject,
};
use k8s_pb::api::scheduling::v1::PriorityClass;
use serde_json::Value;

use super::json::{Obj, Result, Zero, unconverted};
use super::meta::{bytes_map, int_or_string, label_selector, object_meta, quantities};
use super::pod::{local_object_reference, pod_template_spec, template_metadata};

/// Each `(field, empty)` of a status: a create ignores status, so only an empty one passes.
fn empty_status(fields: &[(&str, bool)]) -> Result<()> {
    for (field, empty) in fields {
        unconverted("status", field, *empty)?;
    }
    Ok(())
}

fn with_metadata(
    metadata: Option<k8s_pb::apimachinery::pkg::apis::meta::v1::ObjectMeta>,
) -> Result<Obj> {
    let mut o = Obj::new();
    o.msg("", "metadata", metadata, object_meta)?;
    Ok(o)
}

pub fn namespace(n: Namespace) -> Result<Value> {
    let Namespace {
        metadata,
        spec,
        status,
    } = n;
    if let Some(NamespaceStatus { phase, conditions }) = status {
        empty_status(&[
            ("phase", phase.is_zero()),
            ("conditions", conditions.is_zero()),
        ])?;
    }
    let mut o = with_metadata(metadata)?;
    o.msg("", "spec", spec, |s: NamespaceSpec, _| {
        let NamespaceSpec { finalizers } = s;
        let mut o = Obj::new();
        o.strs("finalizers", finalizers);
        Ok(o.done())
    })?;
    Ok(o.done())
}

pub fn config_map(c: ConfigMap) -> Result<Value> {
    let ConfigMap {
        metadata,
        immutable,
        data,
        binary_data,
    } = c;
    let mut o = with_metadata(metadata)?;
    o.bool_ptr("immutable", immutable);
    o.str_map("data", data);
    bytes_map(&mut o, "binaryData", binary_data);
    Ok(o.done())
}

pub fn secret(s: Secret) -> Result<Value> {
    let Secret {
        metadata,
        immutable,
        data,
        string_data,
        r#type,
    } = s;
    let mut o = with_metadata(metadata)?;
    o.bool_ptr("immutable", immutable);
    bytes_map(&mut o, "data", data);
    o.str_map("stringData", string_data);
    o.str("type", r#type);
    Ok(o.done())
}

pub fn service_account(s: ServiceAccount) -> Result<Value> {
    let ServiceAccount {
        metadata,
        secrets,
        image_pull_secrets,
        automount_service_account_token,
    } = s;
    let mut o = with_metadata(metadata)?;
    o.list("", "secrets", secrets, |r: ObjectReference, _| {
        let ObjectReference {
            kind,
            namespace,
            name,
            uid,
            api_version,
            resource_version,
            field_path,
        } = r;
        let mut o = Obj::new();
        o.str("kind", kind);
        o.str("namespace", namespace);
        o.str("name", name);
        o.str("uid", uid);
        o.str("apiVersion", api_version);
        o.str("resourceVersion", resource_version);
        o.str("fieldPath", field_path);
        Ok(o.done())
    })?;
    o.list(
        "",
        "imagePullSecrets",
        image_pull_secrets,
        local_object_reference,
    )?;
    o.bool_ptr(
        "automountServiceAccountToken",
        automount_service_account_token,
    );
    Ok(o.done())
}

pub fn deployment(d: Deployment) -> Result<Value> {
    let Deployment {
        metadata,
        spec,
        status,
    } = d;
    if let Some(DeploymentStatus {
        observed_generation,
        replicas,
        updated_replicas,
        ready_replicas,
        available_replicas,
        unavailable_replicas,
        terminating_replicas,
        conditions,
        collision_count,
    }) = status
    {
        empty_status(&[
            ("observedGeneration", observed_generation.is_zero()),
            ("replicas", replicas.is_zero()),
            ("updatedReplicas", updated_replicas.is_zero()),
            ("readyReplicas", ready_replicas.is_zero()),
            ("availableReplicas", available_replicas.is_zero()),
            ("unavailableReplicas", unavailable_replicas.is_zero()),
            ("terminatingReplicas", terminating_replicas.is_zero()),
            ("conditions", conditions.is_zero()),
            ("collisionCount", collision_count.is_zero()),
        ])?;
    }
    let mut o = with_metadata(metadata)?;
    o.msg("", "spec", spec, deployment_spec)?;
    Ok(o.done())
}

fn deployment_spec(s: DeploymentSpec, p: &str) -> Result<Value> {
    let DeploymentSpec {
        replicas,
        selector,
        template,
        strategy,
        min_ready_seconds,
        revision_history_limit,
        paused,
        progress_deadline_seconds,
    } = s;
    let mut o = Obj::new();
    o.int_ptr("replicas", replicas);
    o.msg(p, "selector", selector, label_selector)?;
    o.msg(p, "template", template, pod_template_spec)?;
    o.msg(p, "strategy", strategy, |s: DeploymentStrategy, p| {
        let DeploymentStrategy {
            r#type,
            rolling_update,
        } = s;
        let mut o = Obj::new();
        o.str("type", r#type);
        o.msg(
            p,
            "rollingUpdate",
            rolling_update,
            |r: RollingUpdateDeployment, p| {
                let RollingUpdateDeployment {
                    max_unavailable,
                    max_surge,
                } = r;
                let mut o = Obj::new();
                o.msg(p, "maxUnavailable", max_unavailable, int_or_string)?;
                o.msg(p, "maxSurge", max_surge, int_or_string)?;
                Ok(o.done())
            },
        )?;
        Ok(o.done())
    })?;
    o.int("minReadySeconds", min_ready_seconds);
    o.int_ptr("revisionHistoryLimit", revision_history_limit);
    o.bool("paused", paused);
    o.int_ptr("progressDeadlineSeconds", progress_deadline_seconds);
    Ok(o.done())
}

pub fn job(j: Job) -> Result<Value> {
    let Job {
        metadata,
        spec,
        status,
    } = j;
    if let Some(JobStatus {
        conditions,
        start_time,
        completion_time,
        active,
        succeeded,
        failed,
        terminating,
        completed_indexes,
        failed_indexes,
        uncounted_terminated_pods,
        ready,
    }) = status
    {
        empty_status(&[
            ("conditions", conditions.is_zero()),
            ("startTime", start_time.is_none()),
            ("completionTime", completion_time.is_none()),
            ("active", active.is_zero()),
            ("succeeded", succeeded.is_zero()),
            ("failed", failed.is_zero()),
            ("terminating", terminating.is_zero()),
            ("completedIndexes", completed_indexes.is_zero()),
            ("failedIndexes", failed_indexes.is_zero()),
            (
                "uncountedTerminatedPods",
                uncounted_terminated_pods.is_none(),
            ),
            ("ready", ready.is_zero()),
        ])?;
    }
    let mut o = with_metadata(metadata)?;
    o.msg("", "spec", spec, job_spec)?;
    Ok(o.done())
}

fn job_spec(s: JobSpec, p: &str) -> Result<Value> {
    let JobSpec {
        parallelism,
        completions,
        active_deadline_seconds,
        pod_failure_policy,
        success_policy,
        backoff_limit,
        backoff_limit_per_index,
        max_failed_indexes,
        selector,
        manual_selector,
        template,
        ttl_seconds_after_finished,
        completion_mode,
        suspend,
        pod_replacement_policy,
        managed_by,
    } = s;
    unconverted(p, "podFailurePolicy", pod_failure_policy.is_none())?;
    unconverted(p, "successPolicy", success_policy.is_none())?;
    let mut o = Obj::new();
    o.int_ptr("parallelism", parallelism);
    o.int_ptr("completions", completions);
    o.int_ptr("activeDeadlineSeconds", active_deadline_seconds);
    o.int_ptr("backoffLimit", backoff_limit);
    o.int_ptr("backoffLimitPerIndex", backoff_limit_per_index);
    o.int_ptr("maxFailedIndexes", max_failed_indexes);
    o.msg(p, "selector", selector, label_selector)?;
    o.bool_ptr("manualSelector", manual_selector);
    o.msg(p, "template", template, pod_template_spec)?;
    o.int_ptr("ttlSecondsAfterFinished", ttl_seconds_after_finished);
    o.str_ptr("completionMode", completion_mode);
    o.bool_ptr("suspend", suspend);
    o.str_ptr("podReplacementPolicy", pod_replacement_policy);
    o.str_ptr("managedBy", managed_by);
    Ok(o.done())
}

pub fn cron_job(c: CronJob) -> Result<Value> {
    let CronJob {
        metadata,
        spec,
        status,
    } = c;
    if let Some(CronJobStatus {
        active,
        last_schedule_time,
        last_successful_time,
    }) = status
    {
        empty_status(&[
            ("active", active.is_zero()),
            ("lastScheduleTime", last_schedule_time.is_none()),
            ("lastSuccessfulTime", last_successful_time.is_none()),
        ])?;
    }
    let mut o = with_metadata(metadata)?;
    o.msg("", "spec", spec, |s: CronJobSpec, p| {
        let CronJobSpec {
            schedule,
            time_zone,
            starting_deadline_seconds,
            concurrency_policy,
            suspend,
            job_template,
            successful_jobs_history_limit,
            failed_jobs_history_limit,
        } = s;
        let mut o = Obj::new();
        o.str_always("schedule", schedule);
        o.str_ptr("timeZone", time_zone);
        o.int_ptr("startingDeadlineSeconds", starting_deadline_seconds);
        o.str("concurrencyPolicy", concurrency_policy);
        o.bool_ptr("suspend", suspend);
        o.msg(p, "jobTemplate", job_template, |t: JobTemplateSpec, p| {
            let JobTemplateSpec { metadata, spec } = t;
            let mut o = Obj::new();
            template_metadata(&mut o, p, metadata)?;
            o.msg(p, "spec", spec, job_spec)?;
            Ok(o.done())
        })?;
        o.int_ptr("successfulJobsHistoryLimit", successful_jobs_history_limit);
        o.int_ptr("failedJobsHistoryLimit", failed_jobs_history_limit);
        Ok(o.done())
    })?;
    Ok(o.done())
}

pub fn service(s: Service) -> Result<Value> {
    let Service {
        metadata,
        spec,
        status,
    } = s;
    if let Some(ServiceStatus {
        load_balancer,
        conditions,
    }) = status
    {
        let lb_empty = load_balancer.is_none_or(|LoadBalancerStatus { ingress }| ingress.is_zero());
        empty_status(&[
            ("loadBalancer", lb_empty),
            ("conditions", conditions.is_zero()),
        ])?;
    }
    let mut o = with_metadata(metadata)?;
    o.msg("", "spec", spec, service_spec)?;
    Ok(o.done())
}

fn service_spec(s: ServiceSpec, p: &str) -> Result<Value> {
    let ServiceSpec {
        ports,
        selector,
        cluster_ip,
        cluster_ips,
        r#type,
        external_ips,
        session_affinity,
        load_balancer_ip,
        load_balancer_source_ranges,
        external_name,
        external_traffic_policy,
        health_check_node_port,
        publish_not_ready_addresses,
        session_affinity_config,
        ip_families,
        ip_family_policy,
        allocate_load_balancer_node_ports,
        load_balancer_class,
        internal_traffic_policy,
        traffic_distribution,
    } = s;
    let mut o = Obj::new();
    o.list(p, "ports", ports, service_port)?;
    o.str_map("selector", selector);
    o.str("clusterIP", cluster_ip);
    o.strs("clusterIPs", cluster_ips);
    o.str("type", r#type);
    o.strs("externalIPs", external_ips);
    o.str("sessionAffinity", session_affinity);
    o.str("loadBalancerIP", load_balancer_ip);
    o.strs("loadBalancerSourceRanges", load_balancer_source_ranges);
    o.str("externalName", external_name);
    o.str("externalTrafficPolicy", external_traffic_policy);
    o.int("healthCheckNodePort", health_check_node_port);
    o.bool("publishNotReadyAddresses", publish_not_ready_addresses);
    o.msg(
        p,
        "sessionAffinityConfig",
        session_affinity_config,
        |c: SessionAffinityConfig, p| {
            let SessionAffinityConfig { client_ip } = c;
            let mut o = Obj::new();
            o.msg(p, "clientIP", client_ip, |c: ClientIpConfig, _| {
                let ClientIpConfig { timeout_seconds } = c;
                let mut o = Obj::new();
                o.int_ptr("timeoutSeconds", timeout_seconds);
                Ok(o.done())
            })?;
            Ok(o.done())
        },
    )?;
    o.strs("ipFamilies", ip_families);
    o.str_ptr("ipFamilyPolicy", ip_family_policy);
    o.bool_ptr(
        "allocateLoadBalancerNodePorts",
        allocate_load_balancer_node_ports,
    );
    o.str_ptr("loadBalancerClass", load_balancer_class);
    o.str_ptr("internalTrafficPolicy", internal_traffic_policy);
    o.str_ptr("trafficDistribution", traffic_distribution);
    Ok(o.done())
}

fn service_port(s: ServicePort, p: &str) -> Result<Value> {
    let ServicePort {
        name,
        protocol,
        app_protocol,
        port,
        target_port,
        node_port,
    } = s;
    let mut o = Obj::new();
    o.str("name", name);
    o.str("protocol", protocol);
    o.str_ptr("appProtocol", app_protocol);
    o.int_always("port", port);
    // A non-pointer IntOrString: Go writes `0` when unset, which the server defaults to the
    // port, as it does for an absent one; so the zero is left out.
    if let Some(t) = target_port {
        let t = int_or_string(t, &super::json::join(p, "targetPort"))?;
        if t != 0 {
            o.put("targetPort", t);
        }
    }
    o.int("nodePort", node_port);
    Ok(o.done())
}

fn policy_rule(r: PolicyRule, _p: &str) -> Result<Value> {
    let PolicyRule {
        verbs,
        api_groups,
        resources,
        resource_names,
        non_resource_ur_ls,
    } = r;
    let mut o = Obj::new();
    o.strs_always("verbs", verbs);
    o.strs("apiGroups", api_groups);
    o.strs("resources", resources);
    o.strs("resourceNames", resource_names);
    o.strs("nonResourceURLs", non_resource_ur_ls);
    Ok(o.done())
}

fn subject(s: Subject, _p: &str) -> Result<Value> {
    let Subject {
        kind,
        api_group,
        name,
        namespace,
    } = s;
    let mut o = Obj::new();
    o.str_always("kind", kind);
    o.str("apiGroup", api_group);
    o.str_always("name", name);
    o.str("namespace", namespace);
    Ok(o.done())
}

fn role_ref(r: RoleRef, _p: &str) -> Result<Value> {
    let RoleRef {
        api_group,
        kind,
        name,
    } = r;
    let mut o = Obj::new();
    o.str_always("apiGroup", api_group);
    o.str_always("kind", kind);
    o.str_always("name", name);
    Ok(o.done())
}

pub fn role(r: Role) -> Result<Value> {
    let Role { metadata, rules } = r;
    let mut o = with_metadata(metadata)?;
    o.list_always("", "rules", rules, policy_rule)?;
    Ok(o.done())
}

pub fn cluster_role(r: ClusterRole) -> Result<Value> {
    let ClusterRole {
        metadata,
        rules,
        aggregation_rule,
    } = r;
    let mut o = with_metadata(metadata)?;
    o.list_always("", "rules", rules, policy_rule)?;
    o.msg(
        "",
        "aggregationRule",
        aggregation_rule,
        |a: AggregationRule, p| {
            let AggregationRule {
                cluster_role_selectors,
            } = a;
            let mut o = Obj::new();
            o.list(
                p,
                "clusterRoleSelectors",
                cluster_role_selectors,
                label_selector,
            )?;
            Ok(o.done())
        },
    )?;
    Ok(o.done())
}

pub fn role_binding(b: RoleBinding) -> Result<Value> {
    let RoleBinding {
        metadata,
        subjects,
        role_ref: rr,
    } = b;
    let mut o = with_metadata(metadata)?;
    o.list("", "subjects", subjects, subject)?;
    o.msg("", "roleRef", rr, role_ref)?;
    Ok(o.done())
}

pub fn cluster_role_binding(b: ClusterRoleBinding) -> Result<Value> {
    let ClusterRoleBinding {
        metadata,
        subjects,
        role_ref: rr,
    } = b;
    let mut o = with_metadata(metadata)?;
    o.list("", "subjects", subjects, subject)?;
    o.msg("", "roleRef", rr, role_ref)?;
    Ok(o.done())
}

pub fn priority_class(c: PriorityClass) -> Result<Value> {
    let PriorityClass {
        metadata,
        value,
        global_default,
        description,
        preemption_policy,
    } = c;
    let mut o = with_metadata(metadata)?;
    o.int_always("value", value);
    o.bool("globalDefault", global_default);
    o.str("description", description);
    o.str_ptr("preemptionPolicy", preemption_policy);
    Ok(o.done())
}

pub fn pod_disruption_budget(b: PodDisruptionBudget) -> Result<Value> {
    let PodDisruptionBudget {
        metadata,
        spec,
        status,
    } = b;
    if let Some(PodDisruptionBudgetStatus {
        observed_generation,
        disrupted_pods,
        disruptions_allowed,
        current_healthy,
        desired_healthy,
        expected_pods,
        conditions,
    }) = status
    {
        empty_status(&[
            ("observedGeneration", observed_generation.is_zero()),
            ("disruptedPods", disrupted_pods.is_zero()),
            ("disruptionsAllowed", disruptions_allowed.is_zero()),
            ("currentHealthy", current_healthy.is_zero()),
            ("desiredHealthy", desired_healthy.is_zero()),
            ("expectedPods", expected_pods.is_zero()),
            ("conditions", conditions.is_zero()),
        ])?;
    }
    let mut o = with_metadata(metadata)?;
    o.msg("", "spec", spec, |s: PodDisruptionBudgetSpec, p| {
        let PodDisruptionBudgetSpec {
            min_available,
            selector,
            max_unavailable,
            unhealthy_pod_eviction_policy,
        } = s;
        let mut o = Obj::new();
        o.msg(p, "minAvailable", min_available, int_or_string)?;
        o.msg(p, "selector", selector, label_selector)?;
        o.msg(p, "maxUnavailable", max_unavailable, int_or_string)?;
        o.str_ptr("unhealthyPodEvictionPolicy", unhealthy_pod_eviction_policy);
        Ok(o.done())
    })?;
    Ok(o.done())
}

pub fn ingress(i: Ingress) -> Result<Value> {
    let Ingress {
        metadata,
        spec,
        status,
    } = i;
    if let Some(IngressStatus { load_balancer }) = status {
        let lb_empty =
            load_balancer.is_none_or(|IngressLoadBalancerStatus { ingress }| ingress.is_zero());
        empty_status(&[("loadBalancer", lb_empty)])?;
    }
    let mut o = with_metadata(metadata)?;
    o.msg("", "spec", spec, |s: IngressSpec, p| {
        let IngressSpec {
            ingress_class_name,
            default_backend,
            tls,
            rules,
        } = s;
        let mut o = Obj::new();
        o.str_ptr("ingressClassName", ingress_class_name);
        o.msg(p, "defaultBackend", default_backend, ingress_backend)?;
        o.list(p, "tls", tls, |t: IngressTls, _| {
            let IngressTls { hosts, secret_name } = t;
            let mut o = Obj::new();
            o.strs("hosts", hosts);
            o.str("secretName", secret_name);
            Ok(o.done())
        })?;
        o.list(p, "rules", rules, ingress_rule)?;
        Ok(o.done())
    })?;
    Ok(o.done())
}

fn ingress_rule(r: IngressRule, p: &str) -> Result<Value> {
    let IngressRule {
        host,
        ingress_rule_value,
    } = r;
    let mut o = Obj::new();
    o.str("host", host);
    // The rule value is inlined in the rule's JSON.
    if let Some(IngressRuleValue { http }) = ingress_rule_value {
        o.msg(p, "http", http, |h: HttpIngressRuleValue, p| {
            let HttpIngressRuleValue { paths } = h;
            let mut o = Obj::new();
            o.list_always(p, "paths", paths, |h: HttpIngressPath, p| {
                let HttpIngressPath {
                    path,
                    path_type,
                    backend,
                } = h;
                let mut o = Obj::new();
                o.str("path", path);
                o.str_ptr("pathType", path_type);
                o.msg(p, "backend", backend, ingress_backend)?;
                Ok(o.done())
            })?;
            Ok(o.done())
        })?;
    }
    Ok(o.done())
}

fn ingress_backend(b: IngressBackend, p: &str) -> Result<Value> {
    let IngressBackend { service, resource } = b;
    let mut o = Obj::new();
    o.msg(p, "service", service, |s: IngressServiceBackend, p| {
        let IngressServiceBackend { name, port } = s;
        let mut o = Obj::new();
        o.str_always("name", name);
        o.msg(p, "port", port, |s: ServiceBackendPort, _| {
            let ServiceBackendPort { name, number } = s;
            let mut o = Obj::new();
            o.str("name", name);
            o.int("number", number);
            Ok(o.done())
        })?;
        Ok(o.done())
    })?;
    o.msg(
        p,
        "resource",
        resource,
        |r: TypedLocalObjectReference, _| {
            let TypedLocalObjectReference {
                api_group,
                kind,
                name,
            } = r;
            let mut o = Obj::new();
            o.str_ptr("apiGroup", api_group);
            o.str_always("kind", kind);
            o.str_always("name", name);
            Ok(o.done())
        },
    )?;
    Ok(o.done())
}

pub fn resource_quota(q: ResourceQuota) -> Result<Value> {
    let ResourceQuota {
        metadata,
        spec,
        status,
    } = q;
    if let Some(ResourceQuotaStatus { hard, used }) = status {
        empty_status(&[("hard", hard.is_zero()), ("used", used.is_zero())])?;
    }
    let mut o = with_metadata(metadata)?;
    o.msg("", "spec", spec, |s: ResourceQuotaSpec, p| {
        let ResourceQuotaSpec {
            hard,
            scopes,
            scope_selector,
        } = s;
        let mut o = Obj::new();
        quantities(&mut o, "hard", hard);
        o.strs("scopes", scopes);
        o.msg(p, "scopeSelector", scope_selector, |s: ScopeSelector, p| {
            let ScopeSelector { match_expressions } = s;
            let mut o = Obj::new();
            o.list(
                p,
                "matchExpressions",
                match_expressions,
                |r: ScopedResourceSelectorRequirement, _| {
                    let ScopedResourceSelectorRequirement {
                        scope_name,
                        operator,
                        values,
                    } = r;
                    let mut o = Obj::new();
                    o.str_always("scopeName", scope_name);
                    o.str_always("operator", operator);
                    o.strs("values", values);
                    Ok(o.done())
                },
            )?;
            Ok(o.done())
        })?;
        Ok(o.done())
    })?;
    Ok(o.done())
}
