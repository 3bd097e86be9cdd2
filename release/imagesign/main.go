// Command imagesign signs nodeimage's release images the way cosign does
// with a key (a "simple signing" payload, ECDSA P-256, stored in the
// registry under the tag sha256-<digest>.sig), and verifies such
// signatures offline. It exists because Debian's skopeo has its sigstore
// support compiled out, and cosign's Go modules take longer to build than
// the whole release; users verify with cosign or with `imagesign verify`.
//
//	imagesign keygen -out DIR -passphrase-file FILE
//	imagesign sign   -key KEY -passphrase-file FILE -repository REPO -digest DIGEST -out LAYOUT
//	imagesign verify -pub PUB -repository REPO -digest DIGEST LAYOUT
//
// sign writes the signature as an OCI image layout (one manifest, tag
// "sig") that skopeo copies to REPO:sha256-<hex>.sig; verify reads that
// layout back (skopeo copies it out of the registry) and checks every
// signature in it against the public key, the digest and the repository.
package main

import (
	"errors"
	"fmt"
	"os"
)

func main() {
	if len(os.Args) < 2 {
		fail(errors.New("usage: imagesign keygen|sign|verify [flags] (see the source's header)"))
	}
	var err error
	switch os.Args[1] {
	case "keygen":
		err = keygenCmd(os.Args[2:])
	case "sign":
		err = signCmd(os.Args[2:])
	case "verify":
		err = verifyCmd(os.Args[2:])
	default:
		err = fmt.Errorf("unknown command %q (keygen, sign, verify)", os.Args[1])
	}
	if err != nil {
		fail(err)
	}
}

func fail(err error) {
	fmt.Fprintf(os.Stderr, "imagesign: %v\n", err)
	os.Exit(1)
}
