//go:build tools

// This file is never compiled (the "tools" build tag is never set). It only
// records containerd v2.4.2 as a dependency so that go.mod/go.sum keep
// everything tests/cluster/lib.sh (build_containerd) needs for
//
//	go build -o $STATE/bin/containerd-v2.x/ github.com/containerd/containerd/v2/cmd/containerd github.com/containerd/containerd/v2/cmd/ctr \
//		github.com/containerd/containerd/v2/cmd/containerd-shim-runc-v2
package tools

import (
	_ "github.com/containerd/containerd/v2/cmd/containerd"
	_ "github.com/containerd/containerd/v2/cmd/containerd-shim-runc-v2"
	_ "github.com/containerd/containerd/v2/cmd/ctr"
)
