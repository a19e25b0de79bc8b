//go:build tools

// Keeps the node binaries' dependencies in go.mod and go.sum (they are built from the module cache).
package tools

import (
	_ "k8s.io/kubernetes/cmd/kube-proxy"
	_ "k8s.io/kubernetes/cmd/kube-scheduler"
	_ "k8s.io/kubernetes/cmd/kubelet"
)
