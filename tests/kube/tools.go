//go:build tools

// This file is never compiled (the "tools" build tag is never set). It only
// records kubectl as a dependency so that go.mod/go.sum keep everything needed
// by tests/cluster/up.sh's fallback
//
//	go build -o $STATE/bin/kubectl k8s.io/kubernetes/cmd/kubectl
//
// which runs when the machine's kubectl (if any) is more than one minor
// version older than the API server.
package main

import (
	_ "k8s.io/kubernetes/cmd/kubectl"
)
