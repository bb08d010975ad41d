//! rollguard: deploy Kubernetes manifests to many clusters at once, fail fast, roll back by itself.
