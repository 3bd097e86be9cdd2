package main

import (
	"crypto/ecdsa"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// A signature made by sign verifies against its key, repository and
// digest, and against nothing else; a changed payload byte fails too.
func TestSignThenVerify(t *testing.T) {
	dir := t.TempDir()
	pass := filepath.Join(dir, "pass")
	if err := os.WriteFile(pass, []byte("s3cret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"a", "b"} {
		if err := keygenCmd([]string{"-out", filepath.Join(dir, k), "-passphrase-file", pass}); err != nil {
			t.Fatalf("keygen %s: %v", k, err)
		}
	}
	if err := keygenCmd([]string{"-out", filepath.Join(dir, "a"), "-passphrase-file", pass}); err == nil {
		t.Fatal("keygen overwrote an existing key")
	}
	const repo = "registry.example.test/nodeimage/daemon"
	digest := "sha256:" + strings.Repeat("ab", 32)
	layout := filepath.Join(dir, "sig")
	if err := signCmd([]string{"-key", filepath.Join(dir, "a", "cosign.key"), "-passphrase-file", pass,
		"-repository", repo, "-digest", digest, "-out", layout}); err != nil {
		t.Fatalf("sign: %v", err)
	}
	pubA, err := loadPublicKey(filepath.Join(dir, "a", "cosign.pub"))
	if err != nil {
		t.Fatal(err)
	}
	pubB, err := loadPublicKey(filepath.Join(dir, "b", "cosign.pub"))
	if err != nil {
		t.Fatal(err)
	}
	if n, err := verifyLayout(layout, pubA, repo, digest); err != nil || n != 1 {
		t.Fatalf("verify with the signing key: n=%d err=%v", n, err)
	}
	cases := []struct {
		name, repo, digest, want string
		pub                      *ecdsa.PublicKey
	}{
		{"other key", repo, digest, "not made by this key", pubB},
		{"other digest", repo, "sha256:" + strings.Repeat("cd", 32), "signs digest", pubA},
		{"other repository", "registry.example.test/evil/daemon", digest, "signs repository", pubA},
	}
	for _, c := range cases {
		if _, err := verifyLayout(layout, c.pub, c.repo, c.digest); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: err %v, want it to say %q", c.name, err, c.want)
		}
	}

	// A wrong passphrase cannot sign.
	bad := filepath.Join(dir, "bad")
	if err := os.WriteFile(bad, []byte("wrong\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := signCmd([]string{"-key", filepath.Join(dir, "a", "cosign.key"), "-passphrase-file", bad,
		"-repository", repo, "-digest", digest, "-out", filepath.Join(dir, "sig2")}); err == nil {
		t.Fatal("signed with a wrong passphrase")
	}

	// The payload blob altered (its descriptor too, so only the signature can tell).
	var idx index
	raw, _ := os.ReadFile(filepath.Join(layout, "index.json"))
	if err := json.Unmarshal(raw, &idx); err != nil {
		t.Fatal(err)
	}
	mb, err := readBlob(layout, idx.Manifests[0])
	if err != nil {
		t.Fatal(err)
	}
	var m manifest
	if err := json.Unmarshal(mb, &m); err != nil {
		t.Fatal(err)
	}
	body, err := readBlob(layout, m.Layers[0])
	if err != nil {
		t.Fatal(err)
	}
	forged, err := writeBlob(layout, payloadType, []byte(strings.Replace(string(body), "nodeimage", "nodeimagf", 1)))
	if err != nil {
		t.Fatal(err)
	}
	forged.Annotations = m.Layers[0].Annotations
	m.Layers[0] = forged
	nb, _ := json.Marshal(m)
	nd, err := writeBlob(layout, manifestType, nb)
	if err != nil {
		t.Fatal(err)
	}
	idx.Manifests[0] = nd
	if err := writeJSON(filepath.Join(layout, "index.json"), idx); err != nil {
		t.Fatal(err)
	}
	if _, err := verifyLayout(layout, pubA, repo, digest); err == nil || !strings.Contains(err.Error(), "not made by this key") {
		t.Fatalf("a forged payload: err %v", err)
	}
}
