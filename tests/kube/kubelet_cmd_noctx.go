//go:build kubelocal_kubelet_noctx

package main

import (
	"github.com/spf13/cobra"
	kubelet "k8s.io/kubernetes/cmd/kubelet/app"
)

// newKubeletCommand for Kubernetes before v1.31, whose NewKubeletCommand
// takes no context (versions/v1.30 builds with this file's tag).
func newKubeletCommand() *cobra.Command {
	return kubelet.NewKubeletCommand()
}
