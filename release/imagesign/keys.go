package main

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/secure-systems-lab/go-securesystemslib/encrypted"
)

// The PEM types cosign writes and reads for an encrypted key (the older
// one is still what many cosign.key files say).
const (
	encryptedKeyType    = "ENCRYPTED SIGSTORE PRIVATE KEY"
	oldEncryptedKeyType = "ENCRYPTED COSIGN PRIVATE KEY"
)

func keygenCmd(args []string) error {
	fs := flag.NewFlagSet("keygen", flag.ContinueOnError)
	out := fs.String("out", "", "directory for cosign.key and cosign.pub")
	passFile := fs.String("passphrase-file", "", "file whose first line is the key's passphrase")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *out == "" || *passFile == "" {
		return errors.New("usage: imagesign keygen -out DIR -passphrase-file FILE")
	}
	pass, err := readPassphrase(*passFile)
	if err != nil {
		return err
	}
	keyPath, pubPath := filepath.Join(*out, "cosign.key"), filepath.Join(*out, "cosign.pub")
	for _, p := range []string{keyPath, pubPath} {
		if _, err := os.Stat(p); err == nil {
			return fmt.Errorf("%s exists: not overwriting a key", p)
		}
	}
	priv, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return fmt.Errorf("generating the key: %w", err)
	}
	der, err := x509.MarshalPKCS8PrivateKey(priv)
	if err != nil {
		return fmt.Errorf("encoding the private key: %w", err)
	}
	sealed, err := encrypted.Encrypt(der, pass)
	if err != nil {
		return fmt.Errorf("encrypting the private key: %w", err)
	}
	pub, err := x509.MarshalPKIXPublicKey(&priv.PublicKey)
	if err != nil {
		return fmt.Errorf("encoding the public key: %w", err)
	}
	if err := os.MkdirAll(*out, 0o755); err != nil {
		return err
	}
	if err := os.WriteFile(keyPath, pem.EncodeToMemory(&pem.Block{Type: encryptedKeyType, Bytes: sealed}), 0o600); err != nil {
		return err
	}
	return os.WriteFile(pubPath, pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: pub}), 0o644)
}

func readPassphrase(path string) ([]byte, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("reading the passphrase: %w", err)
	}
	pass := strings.SplitN(string(raw), "\n", 2)[0]
	if pass == "" {
		return nil, fmt.Errorf("the passphrase in %s is empty", path)
	}
	return []byte(pass), nil
}

func loadPrivateKey(path string, pass []byte) (*ecdsa.PrivateKey, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("reading the key: %w", err)
	}
	block, _ := pem.Decode(raw)
	if block == nil || (block.Type != encryptedKeyType && block.Type != oldEncryptedKeyType) {
		return nil, fmt.Errorf("%s is not an encrypted cosign key", path)
	}
	der, err := encrypted.Decrypt(block.Bytes, pass)
	if err != nil {
		return nil, fmt.Errorf("decrypting %s (wrong passphrase?): %w", path, err)
	}
	key, err := x509.ParsePKCS8PrivateKey(der)
	if err != nil {
		return nil, fmt.Errorf("parsing %s: %w", path, err)
	}
	ec, ok := key.(*ecdsa.PrivateKey)
	if !ok {
		return nil, fmt.Errorf("%s is not an ECDSA key", path)
	}
	return ec, nil
}

func loadPublicKey(path string) (*ecdsa.PublicKey, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("reading the public key: %w", err)
	}
	block, _ := pem.Decode(raw)
	if block == nil || block.Type != "PUBLIC KEY" {
		return nil, fmt.Errorf("%s is not a PEM public key", path)
	}
	key, err := x509.ParsePKIXPublicKey(block.Bytes)
	if err != nil {
		return nil, fmt.Errorf("parsing %s: %w", path, err)
	}
	ec, ok := key.(*ecdsa.PublicKey)
	if !ok {
		return nil, fmt.Errorf("%s is not an ECDSA public key", path)
	}
	return ec, nil
}
