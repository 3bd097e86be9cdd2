package main

import (
	"crypto/ecdsa"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
)

func verifyCmd(args []string) error {
	fs := flag.NewFlagSet("verify", flag.ContinueOnError)
	pubPath := fs.String("pub", "", "public key (cosign.pub)")
	repo := fs.String("repository", "", "the repository the signature must name")
	digest := fs.String("digest", "", "the manifest digest the signature must name")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *pubPath == "" || *repo == "" || *digest == "" || fs.NArg() != 1 {
		return errors.New("usage: imagesign verify -pub PUB -repository REPO -digest DIGEST LAYOUT")
	}
	pub, err := loadPublicKey(*pubPath)
	if err != nil {
		return err
	}
	n, err := verifyLayout(fs.Arg(0), pub, *repo, *digest)
	if err != nil {
		return err
	}
	fmt.Printf("verified: %s@%s (%d signature(s) by the key)\n", *repo, *digest, n)
	return nil
}

// verifyLayout counts the signatures in the layout that the key made over
// this repository and digest. Others may sit beside them (cosign appends
// every signer's to the same image): they are skipped, and only when none
// verifies is it an error, the first one's reason.
func verifyLayout(layout string, pub *ecdsa.PublicKey, repo, digest string) (int, error) {
	var idx index
	raw, err := os.ReadFile(filepath.Join(layout, "index.json"))
	if err != nil {
		return 0, fmt.Errorf("reading the signature layout: %w", err)
	}
	if err := json.Unmarshal(raw, &idx); err != nil {
		return 0, fmt.Errorf("parsing %s/index.json: %w", layout, err)
	}
	good := 0
	var firstErr error
	for _, md := range idx.Manifests {
		mb, err := readBlob(layout, md)
		if err != nil {
			return 0, err
		}
		var m manifest
		if err := json.Unmarshal(mb, &m); err != nil {
			return 0, fmt.Errorf("parsing manifest %s: %w", md.Digest, err)
		}
		for _, l := range m.Layers {
			if l.MediaType != payloadType {
				continue
			}
			if err := verifyLayer(layout, l, pub, repo, digest); err != nil {
				if firstErr == nil {
					firstErr = fmt.Errorf("signature layer %s: %w", l.Digest, err)
				}
				continue
			}
			good++
		}
	}
	if good == 0 {
		if firstErr != nil {
			return 0, firstErr
		}
		return 0, errors.New("no signature in the layout")
	}
	return good, nil
}

func verifyLayer(layout string, l descriptor, pub *ecdsa.PublicKey, repo, digest string) error {
	body, err := readBlob(layout, l)
	if err != nil {
		return err
	}
	sig, err := base64.StdEncoding.DecodeString(l.Annotations[signatureKey])
	if err != nil || len(sig) == 0 {
		return errors.New("no base64 signature annotation")
	}
	sum := sha256.Sum256(body)
	if !ecdsa.VerifyASN1(pub, sum[:], sig) {
		return errors.New("the signature was not made by this key")
	}
	var p payload
	if err := json.Unmarshal(body, &p); err != nil {
		return fmt.Errorf("parsing the payload: %w", err)
	}
	if p.Critical.Type != payloadKind {
		return fmt.Errorf("payload type %q, want %q", p.Critical.Type, payloadKind)
	}
	if p.Critical.Image.DockerManifestDigest != digest {
		return fmt.Errorf("signs digest %s, not %s", p.Critical.Image.DockerManifestDigest, digest)
	}
	if p.Critical.Identity.DockerReference != repo {
		return fmt.Errorf("signs repository %s, not %s", p.Critical.Identity.DockerReference, repo)
	}
	return nil
}
