package main

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
)

// Media types and annotation of cosign's signature images.
const (
	manifestType     = "application/vnd.oci.image.manifest.v1+json"
	configType       = "application/vnd.oci.image.config.v1+json"
	payloadType      = "application/vnd.dev.cosign.simplesigning.v1+json"
	signatureKey     = "dev.cosignproject.cosign/signature"
	refNameKey       = "org.opencontainers.image.ref.name"
	signatureTagName = "sig"
)

type descriptor struct {
	MediaType   string            `json:"mediaType"`
	Digest      string            `json:"digest"`
	Size        int64             `json:"size"`
	Annotations map[string]string `json:"annotations,omitempty"`
}

type manifest struct {
	SchemaVersion int          `json:"schemaVersion"`
	MediaType     string       `json:"mediaType"`
	Config        descriptor   `json:"config"`
	Layers        []descriptor `json:"layers"`
}

type index struct {
	SchemaVersion int          `json:"schemaVersion"`
	MediaType     string       `json:"mediaType,omitempty"`
	Manifests     []descriptor `json:"manifests"`
}

var digestRe = regexp.MustCompile(`^sha256:[0-9a-f]{64}$`)

func digestOf(b []byte) string {
	s := sha256.Sum256(b)
	return "sha256:" + hex.EncodeToString(s[:])
}

// writeBlob stores b in the layout and returns its descriptor.
func writeBlob(layout, mediaType string, b []byte) (descriptor, error) {
	d := digestOf(b)
	p := filepath.Join(layout, "blobs", "sha256", d[len("sha256:"):])
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		return descriptor{}, err
	}
	if err := os.WriteFile(p, b, 0o644); err != nil {
		return descriptor{}, err
	}
	return descriptor{MediaType: mediaType, Digest: d, Size: int64(len(b))}, nil
}

// readBlob reads a blob of the layout and checks it against its descriptor.
func readBlob(layout string, d descriptor) ([]byte, error) {
	if !digestRe.MatchString(d.Digest) {
		return nil, fmt.Errorf("blob digest %q is not sha256:<64 hex>", d.Digest)
	}
	b, err := os.ReadFile(filepath.Join(layout, "blobs", "sha256", d.Digest[len("sha256:"):]))
	if err != nil {
		return nil, err
	}
	if digestOf(b) != d.Digest || int64(len(b)) != d.Size {
		return nil, fmt.Errorf("blob %s does not match its descriptor", d.Digest)
	}
	return b, nil
}

func writeJSON(path string, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	return os.WriteFile(path, b, 0o644)
}
