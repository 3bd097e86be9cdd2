//go:build !kubelocal_kubelet_noctx

package main

import (
	"context"

	"github.com/spf13/cobra"
	kubelet "k8s.io/kubernetes/cmd/kubelet/app"
)

// newKubeletCommand is kubelet's cobra command. Since Kubernetes v1.31 it
// takes a context; kubelet_cmd_noctx.go builds the older form.
func newKubeletCommand() *cobra.Command {
	return kubelet.NewKubeletCommand(context.Background())
}
