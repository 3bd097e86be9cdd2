# nodeimage: the two commands a newcomer needs, and a few building blocks.
#   make demo   start the local cluster and nodeimage, pull an image onto every node
#   make test   run every test (lint, unit, end-to-end on the local cluster)

.PHONY: demo test build lint unit crds docs images release cluster-up cluster-down real-node nodeimage-up nodeimage-down chart-test install-test test-kube-version

demo:
	tests/demo.sh

test:
	tests/run-all.sh

# The chart's tests, the real-kubelet tests and the helm install of a release
# (amd64) on a local cluster of another Kubernetes version, e.g. the chart's
# floor: KUBE_VERSION=v1.30.14 make test-kube-version (tests/kube-version.sh;
# the versions it can build are tests/kube/go.mod's and tests/kube/versions/).
test-kube-version:
	tests/kube-version.sh

build:
	cargo build --workspace

lint:
	cargo fmt --all -- --check
	cargo clippy --workspace --all-targets -- -D warnings

unit:
	cargo test --workspace

# Regenerate crds/yaml from the Rust types, and the Helm chart's copy of it
# (the chart tests, tests/tests/chart.rs, fail when the two differ).
crds:
	UPDATE_CRDS=1 cargo test -p nodeimage-api --test crd_yaml
	rm -f charts/nodeimage/crds/*.yaml && cp crds/yaml/*.yaml charts/nodeimage/crds/

# Regenerate the field reference per kind (docs/reference, from crds/yaml: run
# after `make crds`) and the chart's README (from values.schema.json and
# values.yaml); tests fail when either is stale.
docs:
	UPDATE_DOCS=1 cargo test -p nodeimage-api --test field_reference
	UPDATE_DOCS=1 cargo test -p nodeimage-tests --test chart_readme

# Container images without Docker (umoci + skopeo), pushed to IMAGE_REGISTRY
# (default: the local cluster's registry); see images/build.sh.
images:
	images/build.sh
	images/check.sh

# A release into dist/ (release/release.sh says what): linux/amd64 and
# linux/arm64 images as OCI indexes, signed, SBOMs, the chart pushed as an
# OCI artifact, checksums. `make test` runs it against the local registry.
release:
	release/release.sh

cluster-up:
	tests/cluster/up.sh

# A real kubelet node (and kube-scheduler) in the running local cluster.
real-node:
	tests/cluster/real-node.sh

cluster-down:
	tests/cluster/down.sh

nodeimage-up:
	tests/nodeimage.sh start

nodeimage-down:
	tests/nodeimage.sh stop

# The Helm chart against the running local cluster (make cluster-up first).
chart-test:
	tests/chart.sh

# The chart installed with helm on the real node, then upgraded to the release
# (tests/tests/install.rs; make cluster-up real-node release first, and helm:
# tests/chart.sh --install-helm). It replaces the e2e tests' nodeimage.
install-test:
	NODEIMAGE_ENV=$${NODEIMAGE_STATE:-.state}/env.sh cargo test --workspace --quiet --test install -- --ignored --test-threads=1
