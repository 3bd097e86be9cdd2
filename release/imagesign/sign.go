package main

import (
	"crypto/ecdsa"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
)

// payload is cosign's "simple signing" document: what is signed.
type payload struct {
	Critical struct {
		Identity struct {
			DockerReference string `json:"docker-reference"`
		} `json:"identity"`
		Image struct {
			DockerManifestDigest string `json:"docker-manifest-digest"`
		} `json:"image"`
		Type string `json:"type"`
	} `json:"critical"`
	Optional map[string]string `json:"optional"`
}

const payloadKind = "cosign container image signature"

func signCmd(args []string) error {
	fs := flag.NewFlagSet("sign", flag.ContinueOnError)
	keyPath := fs.String("key", "", "encrypted private key (cosign.key)")
	passFile := fs.String("passphrase-file", "", "file whose first line is the key's passphrase")
	repo := fs.String("repository", "", "the image's repository, e.g. registry.example.com/nodeimage/daemon")
	digest := fs.String("digest", "", "the signed manifest's digest (sha256:...)")
	out := fs.String("out", "", "directory of the OCI layout to write")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *keyPath == "" || *passFile == "" || *repo == "" || *digest == "" || *out == "" {
		return errors.New("usage: imagesign sign -key KEY -passphrase-file FILE -repository REPO -digest DIGEST -out LAYOUT")
	}
	if !digestRe.MatchString(*digest) {
		return fmt.Errorf("-digest %q is not sha256:<64 hex>", *digest)
	}
	pass, err := readPassphrase(*passFile)
	if err != nil {
		return err
	}
	key, err := loadPrivateKey(*keyPath, pass)
	if err != nil {
		return err
	}
	var p payload
	p.Critical.Identity.DockerReference = *repo
	p.Critical.Image.DockerManifestDigest = *digest
	p.Critical.Type = payloadKind
	body, err := json.Marshal(p)
	if err != nil {
		return err
	}
	sum := sha256.Sum256(body)
	sig, err := ecdsa.SignASN1(rand.Reader, key, sum[:])
	if err != nil {
		return fmt.Errorf("signing: %w", err)
	}

	if err := os.MkdirAll(*out, 0o755); err != nil {
		return err
	}
	layer, err := writeBlob(*out, payloadType, body)
	if err != nil {
		return err
	}
	layer.Annotations = map[string]string{signatureKey: base64.StdEncoding.EncodeToString(sig)}
	config := map[string]any{
		"architecture": "",
		"os":           "",
		"config":       map[string]any{},
		"rootfs":       map[string]any{"type": "layers", "diff_ids": []string{layer.Digest}},
	}
	cb, err := json.Marshal(config)
	if err != nil {
		return err
	}
	cd, err := writeBlob(*out, configType, cb)
	if err != nil {
		return err
	}
	mb, err := json.Marshal(manifest{SchemaVersion: 2, MediaType: manifestType, Config: cd, Layers: []descriptor{layer}})
	if err != nil {
		return err
	}
	md, err := writeBlob(*out, manifestType, mb)
	if err != nil {
		return err
	}
	md.Annotations = map[string]string{refNameKey: signatureTagName}
	if err := writeJSON(filepath.Join(*out, "oci-layout"), map[string]string{"imageLayoutVersion": "1.0.0"}); err != nil {
		return err
	}
	return writeJSON(filepath.Join(*out, "index.json"), index{SchemaVersion: 2, MediaType: "application/vnd.oci.image.index.v1+json", Manifests: []descriptor{md}})
}
