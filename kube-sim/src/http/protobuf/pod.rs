//! PodTemplateSpec, PodSpec and Container from their k8s-pb messages to JSON: the common
//! fields are converted; the rarer ones (affinity, topology spread, ephemeral containers,
//! lifecycle hooks, most volume sources, ...) are refused unless empty.

use k8s_pb::api::core::v1::{
    Capabilities, ConfigMapEnvSource, ConfigMapKeySelector, ConfigMapVolumeSource, Container,
    ContainerPort, EmptyDirVolumeSource, EnvFromSource, EnvVar, EnvVarSource, ExecAction,
    GrpcAction, HostPathVolumeSource, HttpGetAction, HttpHeader, KeyToPath, LocalObjectReference,
    ObjectFieldSelector, PersistentVolumeClaimVolumeSource, PodSecurityContext, PodSpec,
    PodTemplateSpec, Probe, ProbeHandler, ResourceFieldSelector, ResourceRequirements,
    SeccompProfile, SecretEnvSource, SecretKeySelector, SecretVolumeSource, SecurityContext,
    TcpSocketAction, Toleration, Volume, VolumeMount, VolumeSource,
};
use k8s_pb::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde_json::Value;

use super::json::{Obj, Result, Zero, unconverted};
use super::meta::{int_or_string, object_meta, quantities, quantity};

pub fn pod_template_spec(t: PodTemplateSpec, path: &str) -> Result<Value> {
    let PodTemplateSpec { metadata, spec } = t;
    let mut o = Obj::new();
    template_metadata(&mut o, path, metadata)?;
    o.msg(path, "spec", spec, pod_spec)?;
    Ok(o.done())
}

/// The metadata of a template: left out when empty, as the real server does (recording 14:
/// kubectl sends `kubectl create job`'s empty template metadata, and kubectl-create's
/// managed fields have no `f:metadata` for it).
pub fn template_metadata(o: &mut Obj, path: &str, metadata: Option<ObjectMeta>) -> Result<()> {
    if let Some(m) = metadata {
        let m = object_meta(m, &super::json::join(path, "metadata"))?;
        if m.as_object().is_some_and(|m| !m.is_empty()) {
            o.put("metadata", m);
        }
    }
    Ok(())
}

pub fn pod_spec(s: PodSpec, p: &str) -> Result<Value> {
    let PodSpec {
        volumes,
        init_containers,
        containers,
        ephemeral_containers,
        restart_policy,
        termination_grace_period_seconds,
        active_deadline_seconds,
        dns_policy,
        node_selector,
        service_account_name,
        service_account,
        automount_service_account_token,
        node_name,
        host_network,
        host_pid,
        host_ipc,
        share_process_namespace,
        security_context,
        image_pull_secrets,
        hostname,
        subdomain,
        affinity,
        scheduler_name,
        tolerations,
        host_aliases,
        priority_class_name,
        priority,
        dns_config,
        readiness_gates,
        runtime_class_name,
        enable_service_links,
        preemption_policy,
        overhead,
        topology_spread_constraints,
        set_hostname_as_fqdn,
        os,
        host_users,
        scheduling_gates,
        resource_claims,
        resources,
        hostname_override,
        workload_ref,
    } = s;
    unconverted(p, "ephemeralContainers", ephemeral_containers.is_zero())?;
    unconverted(p, "affinity", affinity.is_none())?;
    unconverted(p, "hostAliases", host_aliases.is_zero())?;
    unconverted(p, "dnsConfig", dns_config.is_none())?;
    unconverted(p, "readinessGates", readiness_gates.is_zero())?;
    unconverted(
        p,
        "topologySpreadConstraints",
        topology_spread_constraints.is_zero(),
    )?;
    unconverted(p, "os", os.is_none())?;
    unconverted(p, "schedulingGates", scheduling_gates.is_zero())?;
    unconverted(p, "resourceClaims", resource_claims.is_zero())?;
    unconverted(p, "workloadRef", workload_ref.is_none())?;
    let mut o = Obj::new();
    o.list(p, "volumes", volumes, volume)?;
    o.list(p, "initContainers", init_containers, container)?;
    o.list_always(p, "containers", containers, container)?;
    o.str("restartPolicy", restart_policy);
    o.int_ptr(
        "terminationGracePeriodSeconds",
        termination_grace_period_seconds,
    );
    o.int_ptr("activeDeadlineSeconds", active_deadline_seconds);
    o.str("dnsPolicy", dns_policy);
    o.str_map("nodeSelector", node_selector);
    o.str("serviceAccountName", service_account_name);
    o.str("serviceAccount", service_account);
    o.bool_ptr(
        "automountServiceAccountToken",
        automount_service_account_token,
    );
    o.str("nodeName", node_name);
    o.bool("hostNetwork", host_network);
    o.bool("hostPID", host_pid);
    o.bool("hostIPC", host_ipc);
    o.bool_ptr("shareProcessNamespace", share_process_namespace);
    o.msg(p, "securityContext", security_context, pod_security_context)?;
    o.list(
        p,
        "imagePullSecrets",
        image_pull_secrets,
        local_object_reference,
    )?;
    o.str("hostname", hostname);
    o.str("subdomain", subdomain);
    o.str("schedulerName", scheduler_name);
    o.list(p, "tolerations", tolerations, toleration)?;
    o.str("priorityClassName", priority_class_name);
    o.int_ptr("priority", priority);
    o.str_ptr("runtimeClassName", runtime_class_name);
    o.bool_ptr("enableServiceLinks", enable_service_links);
    o.str_ptr("preemptionPolicy", preemption_policy);
    quantities(&mut o, "overhead", overhead);
    o.bool_ptr("setHostnameAsFQDN", set_hostname_as_fqdn);
    o.bool_ptr("hostUsers", host_users);
    o.msg(p, "resources", resources, resource_requirements)?;
    o.str_ptr("hostnameOverride", hostname_override);
    Ok(o.done())
}

pub fn local_object_reference(r: LocalObjectReference, _p: &str) -> Result<Value> {
    let LocalObjectReference { name } = r;
    let mut o = Obj::new();
    o.str("name", name);
    Ok(o.done())
}

/// The inlined LocalObjectReference of a selector: its `name` in the outer object.
fn inline_name(o: &mut Obj, r: Option<LocalObjectReference>) {
    if let Some(LocalObjectReference { name }) = r {
        o.str("name", name);
    }
}

fn pod_security_context(c: PodSecurityContext, p: &str) -> Result<Value> {
    let PodSecurityContext {
        se_linux_options,
        windows_options,
        run_as_user,
        run_as_group,
        run_as_non_root,
        supplemental_groups,
        supplemental_groups_policy,
        fs_group,
        sysctls,
        fs_group_change_policy,
        seccomp_profile,
        app_armor_profile,
        se_linux_change_policy,
    } = c;
    unconverted(p, "seLinuxOptions", se_linux_options.is_none())?;
    unconverted(p, "windowsOptions", windows_options.is_none())?;
    unconverted(p, "sysctls", sysctls.is_zero())?;
    unconverted(p, "appArmorProfile", app_armor_profile.is_none())?;
    let mut o = Obj::new();
    o.int_ptr("runAsUser", run_as_user);
    o.int_ptr("runAsGroup", run_as_group);
    o.bool_ptr("runAsNonRoot", run_as_non_root);
    if !supplemental_groups.is_empty() {
        o.put("supplementalGroups", serde_json::json!(supplemental_groups));
    }
    o.str_ptr("supplementalGroupsPolicy", supplemental_groups_policy);
    o.int_ptr("fsGroup", fs_group);
    o.str_ptr("fsGroupChangePolicy", fs_group_change_policy);
    o.msg(p, "seccompProfile", seccomp_profile, seccomp)?;
    o.str_ptr("seLinuxChangePolicy", se_linux_change_policy);
    Ok(o.done())
}

fn seccomp(s: SeccompProfile, _p: &str) -> Result<Value> {
    let SeccompProfile {
        r#type,
        localhost_profile,
    } = s;
    let mut o = Obj::new();
    o.str_always("type", r#type);
    o.str_ptr("localhostProfile", localhost_profile);
    Ok(o.done())
}

fn security_context(c: SecurityContext, p: &str) -> Result<Value> {
    let SecurityContext {
        capabilities,
        privileged,
        se_linux_options,
        windows_options,
        run_as_user,
        run_as_group,
        run_as_non_root,
        read_only_root_filesystem,
        allow_privilege_escalation,
        proc_mount,
        seccomp_profile,
        app_armor_profile,
    } = c;
    unconverted(p, "seLinuxOptions", se_linux_options.is_none())?;
    unconverted(p, "windowsOptions", windows_options.is_none())?;
    unconverted(p, "appArmorProfile", app_armor_profile.is_none())?;
    let mut o = Obj::new();
    o.msg(p, "capabilities", capabilities, |c: Capabilities, _| {
        let Capabilities { add, drop } = c;
        let mut o = Obj::new();
        o.strs("add", add);
        o.strs("drop", drop);
        Ok(o.done())
    })?;
    o.bool_ptr("privileged", privileged);
    o.int_ptr("runAsUser", run_as_user);
    o.int_ptr("runAsGroup", run_as_group);
    o.bool_ptr("runAsNonRoot", run_as_non_root);
    o.bool_ptr("readOnlyRootFilesystem", read_only_root_filesystem);
    o.bool_ptr("allowPrivilegeEscalation", allow_privilege_escalation);
    o.str_ptr("procMount", proc_mount);
    o.msg(p, "seccompProfile", seccomp_profile, seccomp)?;
    Ok(o.done())
}

pub fn container(c: Container, p: &str) -> Result<Value> {
    let Container {
        name,
        image,
        command,
        args,
        working_dir,
        ports,
        env_from,
        env,
        resources,
        resize_policy,
        restart_policy,
        restart_policy_rules,
        volume_mounts,
        volume_devices,
        liveness_probe,
        readiness_probe,
        startup_probe,
        lifecycle,
        termination_message_path,
        termination_message_policy,
        image_pull_policy,
        security_context: sc,
        stdin,
        stdin_once,
        tty,
    } = c;
    unconverted(p, "resizePolicy", resize_policy.is_zero())?;
    unconverted(p, "restartPolicyRules", restart_policy_rules.is_zero())?;
    unconverted(p, "volumeDevices", volume_devices.is_zero())?;
    unconverted(p, "lifecycle", lifecycle.is_none())?;
    let mut o = Obj::new();
    o.str_always("name", name);
    o.str("image", image);
    o.strs("command", command);
    o.strs("args", args);
    o.str("workingDir", working_dir);
    o.list(p, "ports", ports, container_port)?;
    o.list(p, "envFrom", env_from, env_from_source)?;
    o.list(p, "env", env, env_var)?;
    o.msg(p, "resources", resources, resource_requirements)?;
    o.str_ptr("restartPolicy", restart_policy);
    o.list(p, "volumeMounts", volume_mounts, volume_mount)?;
    o.msg(p, "livenessProbe", liveness_probe, probe)?;
    o.msg(p, "readinessProbe", readiness_probe, probe)?;
    o.msg(p, "startupProbe", startup_probe, probe)?;
    o.str("terminationMessagePath", termination_message_path);
    o.str("terminationMessagePolicy", termination_message_policy);
    o.str("imagePullPolicy", image_pull_policy);
    o.msg(p, "securityContext", sc, security_context)?;
    o.bool("stdin", stdin);
    o.bool("stdinOnce", stdin_once);
    o.bool("tty", tty);
    Ok(o.done())
}

fn container_port(c: ContainerPort, _p: &str) -> Result<Value> {
    let ContainerPort {
        name,
        host_port,
        container_port,
        protocol,
        host_ip,
    } = c;
    let mut o = Obj::new();
    o.str("name", name);
    o.int("hostPort", host_port);
    o.int_always("containerPort", container_port);
    o.str("protocol", protocol);
    o.str("hostIP", host_ip);
    Ok(o.done())
}

fn env_from_source(e: EnvFromSource, p: &str) -> Result<Value> {
    let EnvFromSource {
        prefix,
        config_map_ref,
        secret_ref,
    } = e;
    let mut o = Obj::new();
    o.str("prefix", prefix);
    o.msg(
        p,
        "configMapRef",
        config_map_ref,
        |r: ConfigMapEnvSource, _| {
            let ConfigMapEnvSource {
                local_object_reference,
                optional,
            } = r;
            let mut o = Obj::new();
            inline_name(&mut o, local_object_reference);
            o.bool_ptr("optional", optional);
            Ok(o.done())
        },
    )?;
    o.msg(p, "secretRef", secret_ref, |r: SecretEnvSource, _| {
        let SecretEnvSource {
            local_object_reference,
            optional,
        } = r;
        let mut o = Obj::new();
        inline_name(&mut o, local_object_reference);
        o.bool_ptr("optional", optional);
        Ok(o.done())
    })?;
    Ok(o.done())
}

fn env_var(e: EnvVar, p: &str) -> Result<Value> {
    let EnvVar {
        name,
        value,
        value_from,
    } = e;
    let mut o = Obj::new();
    o.str_always("name", name);
    o.str("value", value);
    o.msg(p, "valueFrom", value_from, env_var_source)?;
    Ok(o.done())
}

fn env_var_source(s: EnvVarSource, p: &str) -> Result<Value> {
    let EnvVarSource {
        field_ref,
        resource_field_ref,
        config_map_key_ref,
        secret_key_ref,
        file_key_ref,
    } = s;
    unconverted(p, "fileKeyRef", file_key_ref.is_none())?;
    let mut o = Obj::new();
    o.msg(p, "fieldRef", field_ref, |f: ObjectFieldSelector, _| {
        let ObjectFieldSelector {
            api_version,
            field_path,
        } = f;
        let mut o = Obj::new();
        o.str("apiVersion", api_version);
        o.str_always("fieldPath", field_path);
        Ok(o.done())
    })?;
    o.msg(
        p,
        "resourceFieldRef",
        resource_field_ref,
        |f: ResourceFieldSelector, p| {
            let ResourceFieldSelector {
                container_name,
                resource,
                divisor,
            } = f;
            let mut o = Obj::new();
            o.str("containerName", container_name);
            o.str_always("resource", resource);
            o.msg(p, "divisor", divisor, quantity)?;
            Ok(o.done())
        },
    )?;
    o.msg(
        p,
        "configMapKeyRef",
        config_map_key_ref,
        |k: ConfigMapKeySelector, _| {
            let ConfigMapKeySelector {
                local_object_reference,
                key,
                optional,
            } = k;
            let mut o = Obj::new();
            inline_name(&mut o, local_object_reference);
            o.str_always("key", key);
            o.bool_ptr("optional", optional);
            Ok(o.done())
        },
    )?;
    o.msg(
        p,
        "secretKeyRef",
        secret_key_ref,
        |k: SecretKeySelector, _| {
            let SecretKeySelector {
                local_object_reference,
                key,
                optional,
            } = k;
            let mut o = Obj::new();
            inline_name(&mut o, local_object_reference);
            o.str_always("key", key);
            o.bool_ptr("optional", optional);
            Ok(o.done())
        },
    )?;
    Ok(o.done())
}

pub fn resource_requirements(r: ResourceRequirements, p: &str) -> Result<Value> {
    let ResourceRequirements {
        limits,
        requests,
        claims,
    } = r;
    unconverted(p, "claims", claims.is_zero())?;
    let mut o = Obj::new();
    quantities(&mut o, "limits", limits);
    quantities(&mut o, "requests", requests);
    Ok(o.done())
}

fn volume_mount(m: VolumeMount, _p: &str) -> Result<Value> {
    let VolumeMount {
        name,
        read_only,
        recursive_read_only,
        mount_path,
        sub_path,
        mount_propagation,
        sub_path_expr,
    } = m;
    let mut o = Obj::new();
    o.str_always("name", name);
    o.bool("readOnly", read_only);
    o.str_ptr("recursiveReadOnly", recursive_read_only);
    o.str_always("mountPath", mount_path);
    o.str("subPath", sub_path);
    o.str_ptr("mountPropagation", mount_propagation);
    o.str("subPathExpr", sub_path_expr);
    Ok(o.done())
}

fn probe(pr: Probe, p: &str) -> Result<Value> {
    let Probe {
        handler,
        initial_delay_seconds,
        timeout_seconds,
        period_seconds,
        success_threshold,
        failure_threshold,
        termination_grace_period_seconds,
    } = pr;
    let mut o = Obj::new();
    // The handler is inlined in the probe's JSON.
    if let Some(ProbeHandler {
        exec,
        http_get,
        tcp_socket,
        grpc,
    }) = handler
    {
        o.msg(p, "exec", exec, |e: ExecAction, _| {
            let ExecAction { command } = e;
            let mut o = Obj::new();
            o.strs("command", command);
            Ok(o.done())
        })?;
        o.msg(p, "httpGet", http_get, |h: HttpGetAction, p| {
            let HttpGetAction {
                path,
                port,
                host,
                scheme,
                http_headers,
            } = h;
            let mut o = Obj::new();
            o.str("path", path);
            o.msg(p, "port", port, int_or_string)?;
            o.str("host", host);
            o.str("scheme", scheme);
            o.list(p, "httpHeaders", http_headers, |h: HttpHeader, _| {
                let HttpHeader { name, value } = h;
                let mut o = Obj::new();
                o.str_always("name", name);
                o.str_always("value", value);
                Ok(o.done())
            })?;
            Ok(o.done())
        })?;
        o.msg(p, "tcpSocket", tcp_socket, |t: TcpSocketAction, p| {
            let TcpSocketAction { port, host } = t;
            let mut o = Obj::new();
            o.msg(p, "port", port, int_or_string)?;
            o.str("host", host);
            Ok(o.done())
        })?;
        o.msg(p, "grpc", grpc, |g: GrpcAction, _| {
            let GrpcAction { port, service } = g;
            let mut o = Obj::new();
            o.int_always("port", port);
            o.str_ptr("service", service);
            Ok(o.done())
        })?;
    }
    o.int("initialDelaySeconds", initial_delay_seconds);
    o.int("timeoutSeconds", timeout_seconds);
    o.int("periodSeconds", period_seconds);
    o.int("successThreshold", success_threshold);
    o.int("failureThreshold", failure_threshold);
    o.int_ptr(
        "terminationGracePeriodSeconds",
        termination_grace_period_seconds,
    );
    Ok(o.done())
}

fn toleration(t: Toleration, _p: &str) -> Result<Value> {
    let Toleration {
        key,
        operator,
        value,
        effect,
        toleration_seconds,
    } = t;
    let mut o = Obj::new();
    o.str("key", key);
    o.str("operator", operator);
    o.str("value", value);
    o.str("effect", effect);
    o.int_ptr("tolerationSeconds", toleration_seconds);
    Ok(o.done())
}

fn key_to_path(k: KeyToPath, _p: &str) -> Result<Value> {
    let KeyToPath { key, path, mode } = k;
    let mut o = Obj::new();
    o.str_always("key", key);
    o.str_always("path", path);
    o.int_ptr("mode", mode);
    Ok(o.done())
}

fn volume(v: Volume, p: &str) -> Result<Value> {
    let Volume {
        name,
        volume_source,
    } = v;
    let mut o = Obj::new();
    o.str_always("name", name);
    // The source is inlined in the volume's JSON.
    if let Some(source) = volume_source {
        volume_source_into(&mut o, source, p)?;
    }
    Ok(o.done())
}

fn volume_source_into(o: &mut Obj, s: VolumeSource, p: &str) -> Result<()> {
    let VolumeSource {
        host_path,
        empty_dir,
        gce_persistent_disk,
        aws_elastic_block_store,
        git_repo,
        secret,
        nfs,
        iscsi,
        glusterfs,
        persistent_volume_claim,
        rbd,
        flex_volume,
        cinder,
        cephfs,
        flocker,
        downward_api,
        fc,
        azure_file,
        config_map,
        vsphere_volume,
        quobyte,
        azure_disk,
        photon_persistent_disk,
        projected,
        portworx_volume,
        scale_io,
        storageos,
        csi,
        ephemeral,
        image,
    } = s;
    for (field, empty) in [
        ("gcePersistentDisk", gce_persistent_disk.is_none()),
        ("awsElasticBlockStore", aws_elastic_block_store.is_none()),
        ("gitRepo", git_repo.is_none()),
        ("nfs", nfs.is_none()),
        ("iscsi", iscsi.is_none()),
        ("glusterfs", glusterfs.is_none()),
        ("rbd", rbd.is_none()),
        ("flexVolume", flex_volume.is_none()),
        ("cinder", cinder.is_none()),
        ("cephfs", cephfs.is_none()),
        ("flocker", flocker.is_none()),
        ("downwardAPI", downward_api.is_none()),
        ("fc", fc.is_none()),
        ("azureFile", azure_file.is_none()),
        ("vsphereVolume", vsphere_volume.is_none()),
        ("quobyte", quobyte.is_none()),
        ("azureDisk", azure_disk.is_none()),
        ("photonPersistentDisk", photon_persistent_disk.is_none()),
        ("projected", projected.is_none()),
        ("portworxVolume", portworx_volume.is_none()),
        ("scaleIO", scale_io.is_none()),
        ("storageos", storageos.is_none()),
        ("csi", csi.is_none()),
        ("ephemeral", ephemeral.is_none()),
        ("image", image.is_none()),
    ] {
        unconverted(p, field, empty)?;
    }
    o.msg(p, "hostPath", host_path, host_path_source)?;
    o.msg(p, "emptyDir", empty_dir, empty_dir_source)?;
    o.msg(p, "secret", secret, secret_source)?;
    o.msg(
        p,
        "persistentVolumeClaim",
        persistent_volume_claim,
        claim_source,
    )?;
    o.msg(p, "configMap", config_map, config_map_source)?;
    Ok(())
}

fn host_path_source(h: HostPathVolumeSource, _p: &str) -> Result<Value> {
    let HostPathVolumeSource { path, r#type } = h;
    let mut o = Obj::new();
    o.str_always("path", path);
    o.str_ptr("type", r#type);
    Ok(o.done())
}

fn empty_dir_source(e: EmptyDirVolumeSource, p: &str) -> Result<Value> {
    let EmptyDirVolumeSource { medium, size_limit } = e;
    let mut o = Obj::new();
    o.str("medium", medium);
    o.msg(p, "sizeLimit", size_limit, quantity)?;
    Ok(o.done())
}

fn secret_source(s: SecretVolumeSource, p: &str) -> Result<Value> {
    let SecretVolumeSource {
        secret_name,
        items,
        default_mode,
        optional,
    } = s;
    let mut o = Obj::new();
    o.str("secretName", secret_name);
    o.list(p, "items", items, key_to_path)?;
    o.int_ptr("defaultMode", default_mode);
    o.bool_ptr("optional", optional);
    Ok(o.done())
}

fn claim_source(c: PersistentVolumeClaimVolumeSource, _p: &str) -> Result<Value> {
    let PersistentVolumeClaimVolumeSource {
        claim_name,
        read_only,
    } = c;
    let mut o = Obj::new();
    o.str_always("claimName", claim_name);
    o.bool("readOnly", read_only);
    Ok(o.done())
}

fn config_map_source(c: ConfigMapVolumeSource, p: &str) -> Result<Value> {
    let ConfigMapVolumeSource {
        local_object_reference,
        items,
        default_mode,
        optional,
    } = c;
    let mut o = Obj::new();
    inline_name(&mut o, local_object_reference);
    o.list(p, "items", items, key_to_path)?;
    o.int_ptr("defaultMode", default_mode);
    o.bool_ptr("optional", optional);
    Ok(o.done())
}
