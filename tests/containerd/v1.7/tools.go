//go:build tools

// This file is never compiled (the "tools" build tag is never set). It only
// records containerd v1.7.35 as a dependency so that go.mod/go.sum keep
// everything tests/cluster/lib.sh (build_containerd) needs for
//
//	go build -o $STATE/bin/containerd-v1.7/ github.com/containerd/containerd/cmd/containerd github.com/containerd/containerd/cmd/ctr \
//		github.com/containerd/containerd/cmd/containerd-shim-runc-v2
package tools

import (
	_ "github.com/containerd/containerd/cmd/containerd"
	_ "github.com/containerd/containerd/cmd/containerd-shim-runc-v2"
	_ "github.com/containerd/containerd/cmd/ctr"
)
