module nodeimage.local/release/imagesign

go 1.25.0

require github.com/secure-systems-lab/go-securesystemslib v0.11.1

require (
	golang.org/x/crypto v0.55.0 // indirect
	golang.org/x/sys v0.47.0 // indirect
)
