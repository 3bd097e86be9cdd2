// Command kubelocal runs a real Kubernetes control plane on loopback for
// nodeimage's tests and demo: kube-apiserver with an embedded etcd, a
// kube-controller-manager limited to the controllers a test cluster needs
// (garbage collection, namespaces, service accounts, the root CA ConfigMap,
// the deployment, replicaset, daemonset and pod GC controllers that run
// pods, and the aggregation of ClusterRoles into view, edit and admin),
// kube-scheduler, and
// kubelet for the real node.
//
// Usage:
//
//	kubelocal apiserver <state-dir> <apiserver-port> <etcd-port>
//	kubelocal controller-manager <state-dir>
//	kubelocal scheduler <state-dir>
//	kubelocal kubelet <kubelet flags...>
//	kubelocal client-cert <state-dir> <user> <group> <out-dir>
//
// The apiserver subcommand creates its credentials in <state-dir> on first
// start (a CA, a serving certificate for 127.0.0.1, a service-account signing
// key, an admin bearer token) and writes <state-dir>/kubeconfig.
package main

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"go.etcd.io/etcd/server/v3/embed"
	"k8s.io/component-base/cli"
	apiserver "k8s.io/kubernetes/cmd/kube-apiserver/app"
	kcm "k8s.io/kubernetes/cmd/kube-controller-manager/app"
	scheduler "k8s.io/kubernetes/cmd/kube-scheduler/app"
)

func main() {
	if len(os.Args) < 3 {
		fail("usage: kubelocal apiserver <dir> <port> <etcd-port> | kubelocal controller-manager <dir> | kubelocal scheduler <dir> | kubelocal kubelet <flags...>")
	}
	dir := os.Args[2]
	switch os.Args[1] {
	case "scheduler":
		runScheduler(dir)
	case "client-cert":
		if len(os.Args) != 6 {
			fail("usage: kubelocal client-cert <dir> <user> <group> <out-dir>")
		}
		clientCert(dir, os.Args[3], os.Args[4], os.Args[5])
	case "kubelet":
		// The flags come from tests/cluster/up.sh, which owns the node's layout.
		cmd := newKubeletCommand()
		cmd.SetArgs(os.Args[2:])
		os.Exit(cli.Run(cmd))
	case "apiserver":
		if len(os.Args) != 5 {
			fail("usage: kubelocal apiserver <dir> <port> <etcd-port>")
		}
		runAPIServer(dir, os.Args[3], os.Args[4])
	case "controller-manager":
		runControllerManager(dir)
	default:
		fail("unknown subcommand " + os.Args[1])
	}
}

func fail(msg string) {
	fmt.Fprintln(os.Stderr, "kubelocal: "+msg)
	os.Exit(2)
}

func must(err error, what string) {
	if err != nil {
		fail(what + ": " + err.Error())
	}
}

func runAPIServer(dir, port, etcdPort string) {
	pki := filepath.Join(dir, "pki")
	must(os.MkdirAll(pki, 0o700), "create pki dir")
	ensureCredentials(pki, dir, port)

	// As on GKE: Pods of the critical priority classes are admitted only in
	// a namespace with a ResourceQuota that covers their class (GKE ships
	// one in kube-system only), so a chart that sets such a class must
	// bring its own quota (charts/nodeimage: daemon.priorityQuota).
	admission := filepath.Join(dir, "admission.yaml")
	must(os.WriteFile(admission, []byte(criticalPriorityQuota), 0o644), "write the admission configuration")

	etcd := startEtcd(filepath.Join(dir, "etcd"), etcdPort)
	defer etcd.Close()

	cmd := apiserver.NewAPIServerCommand()
	cmd.SetArgs([]string{
		"--etcd-servers=http://127.0.0.1:" + etcdPort,
		"--bind-address=127.0.0.1",
		"--advertise-address=127.0.0.1",
		"--secure-port=" + port,
		"--tls-cert-file=" + filepath.Join(pki, "serving.crt"),
		"--tls-private-key-file=" + filepath.Join(pki, "serving.key"),
		"--client-ca-file=" + filepath.Join(pki, "ca.crt"),
		"--token-auth-file=" + filepath.Join(pki, "tokens.csv"),
		"--authorization-mode=Node,RBAC",
		"--service-account-issuer=https://kubernetes.default.svc.cluster.local",
		"--service-account-key-file=" + filepath.Join(pki, "sa.key"),
		"--service-account-signing-key-file=" + filepath.Join(pki, "sa.key"),
		"--api-audiences=https://kubernetes.default.svc.cluster.local",
		"--service-cluster-ip-range=10.96.0.0/16",
		"--allow-privileged=true",
		"--admission-control-config-file=" + admission,
		"--profiling=false",
		// Loopback addresses cannot be Endpoints of the kubernetes Service.
		"--endpoint-reconciler-type=none",
		// The real node has no resolvable host name: reach kubelets (logs,
		// exec) at their InternalIP.
		"--kubelet-preferred-address-types=InternalIP,Hostname",
		"--v=0",
	})
	os.Exit(cli.Run(cmd))
}

// The ResourceQuota admission settings GKE uses for critical priority classes.
const criticalPriorityQuota = `apiVersion: apiserver.config.k8s.io/v1
kind: AdmissionConfiguration
plugins:
- name: ResourceQuota
  configuration:
    apiVersion: apiserver.config.k8s.io/v1
    kind: ResourceQuotaConfiguration
    limitedResources:
    - resource: pods
      matchScopes:
      - scopeName: PriorityClass
        operator: In
        values: ["system-node-critical", "system-cluster-critical"]
`

func runControllerManager(dir string) {
	cmd := kcm.NewControllerManagerCommand()
	cmd.SetArgs([]string{
		"--kubeconfig=" + filepath.Join(dir, "kubeconfig"),
		"--authentication-kubeconfig=" + filepath.Join(dir, "kubeconfig"),
		"--authorization-kubeconfig=" + filepath.Join(dir, "kubeconfig"),
		"--controllers=garbagecollector,namespace,serviceaccount,deployment,replicaset,daemonset,podgc,root-ca-cert-publisher,resourcequota,clusterrole-aggregation",
		// Published as the kube-root-ca.crt ConfigMap in every namespace,
		// which pods' service-account volumes need.
		"--root-ca-file=" + filepath.Join(dir, "pki", "ca.crt"),
		"--leader-elect=false",
		"--bind-address=127.0.0.1",
		"--secure-port=0",
		"--use-service-account-credentials=false",
		"--v=0",
	})
	os.Exit(cli.Run(cmd))
}

func runScheduler(dir string) {
	cmd := scheduler.NewSchedulerCommand()
	cmd.SetArgs([]string{
		"--kubeconfig=" + filepath.Join(dir, "kubeconfig"),
		"--authentication-kubeconfig=" + filepath.Join(dir, "kubeconfig"),
		"--authorization-kubeconfig=" + filepath.Join(dir, "kubeconfig"),
		"--leader-elect=false",
		"--bind-address=127.0.0.1",
		"--secure-port=0",
		"--v=0",
	})
	os.Exit(cli.Run(cmd))
}

func startEtcd(dataDir, port string) *embed.Etcd {
	cfg := embed.NewConfig()
	cfg.Name = "kubelocal"
	cfg.Dir = dataDir
	client := url.URL{Scheme: "http", Host: "127.0.0.1:" + port}
	p, err := strconv.Atoi(port)
	must(err, "etcd port")
	peer := url.URL{Scheme: "http", Host: "127.0.0.1:" + strconv.Itoa(p+1)}
	cfg.ListenClientUrls = []url.URL{client}
	cfg.AdvertiseClientUrls = []url.URL{client}
	cfg.ListenPeerUrls = []url.URL{peer}
	cfg.AdvertisePeerUrls = []url.URL{peer}
	cfg.InitialCluster = cfg.InitialClusterFromName(cfg.Name)
	cfg.LogLevel = "error"
	// Test data only: trading durability for speed is right here.
	cfg.UnsafeNoFsync = true
	e, err := embed.StartEtcd(cfg)
	must(err, "start etcd")
	select {
	case <-e.Server.ReadyNotify():
	case <-time.After(60 * time.Second):
		fail("etcd did not become ready within 60s")
	}
	return e
}

// ensureCredentials creates the CA, serving cert, service-account key, admin
// token and kubeconfig once; later starts reuse them.
func ensureCredentials(pki, dir, port string) {
	if _, err := os.Stat(filepath.Join(pki, "tokens.csv")); err == nil {
		return
	}
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	must(err, "ca key")
	caTmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "nodeimage-test-ca"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(10 * 365 * 24 * time.Hour),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	must(err, "ca cert")
	caCert, err := x509.ParseCertificate(caDER)
	must(err, "parse ca")

	srvKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	must(err, "serving key")
	srvTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(2),
		Subject:      pkix.Name{CommonName: "kube-apiserver"},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(10 * 365 * 24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		IPAddresses:  []net.IP{net.ParseIP("127.0.0.1"), net.ParseIP("10.96.0.1")},
		DNSNames:     []string{"localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc"},
	}
	srvDER, err := x509.CreateCertificate(rand.Reader, srvTmpl, caCert, &srvKey.PublicKey, caKey)
	must(err, "serving cert")

	saKey, err := rsa.GenerateKey(rand.Reader, 2048)
	must(err, "sa key")

	tok := make([]byte, 24)
	_, err = rand.Read(tok)
	must(err, "token")
	token := hex.EncodeToString(tok)

	writePEM(filepath.Join(pki, "ca.crt"), "CERTIFICATE", caDER)
	caKeyDER, err := x509.MarshalPKCS8PrivateKey(caKey)
	must(err, "marshal ca key")
	writePEM(filepath.Join(pki, "ca.key"), "PRIVATE KEY", caKeyDER)
	writePEM(filepath.Join(pki, "serving.crt"), "CERTIFICATE", srvDER)
	srvKeyDER, err := x509.MarshalPKCS8PrivateKey(srvKey)
	must(err, "marshal serving key")
	writePEM(filepath.Join(pki, "serving.key"), "PRIVATE KEY", srvKeyDER)
	writePEM(filepath.Join(pki, "sa.key"), "RSA PRIVATE KEY", x509.MarshalPKCS1PrivateKey(saKey))

	kubeconfig := fmt.Sprintf(`apiVersion: v1
kind: Config
clusters:
- name: nodeimage-local
  cluster:
    server: https://127.0.0.1:%s
    certificate-authority: %s
users:
- name: admin
  user:
    token: %s
contexts:
- name: nodeimage-local
  context:
    cluster: nodeimage-local
    user: admin
current-context: nodeimage-local
`, port, filepath.Join(pki, "ca.crt"), token)
	must(os.WriteFile(filepath.Join(dir, "kubeconfig"), []byte(kubeconfig), 0o600), "write kubeconfig")
	// Written last: its presence marks the credentials as complete.
	must(os.WriteFile(filepath.Join(pki, "tokens.csv"),
		[]byte(token+",admin,admin-uid,\"system:masters\"\n"), 0o600), "write tokens")
}

// clientCert signs a client certificate for user (CN) in group (O) with the
// cluster's CA, e.g. system:node:<name> in system:nodes for a kubelet, and
// writes <out>/client.crt and <out>/client.key.
func clientCert(dir, user, group, out string) {
	pki := filepath.Join(dir, "pki")
	caCert := readPEM(filepath.Join(pki, "ca.crt"), "CERTIFICATE")
	ca, err := x509.ParseCertificate(caCert)
	must(err, "parse ca.crt")
	keyDER := readPEM(filepath.Join(pki, "ca.key"), "PRIVATE KEY")
	caKey, err := x509.ParsePKCS8PrivateKey(keyDER)
	must(err, "parse ca.key")
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	must(err, "client key")
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 62))
	must(err, "serial")
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: user, Organization: []string{group}},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(365 * 24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	must(err, "sign client cert")
	must(os.MkdirAll(out, 0o700), "create "+out)
	writePEM(filepath.Join(out, "client.crt"), "CERTIFICATE", der)
	kd, err := x509.MarshalPKCS8PrivateKey(key)
	must(err, "marshal client key")
	writePEM(filepath.Join(out, "client.key"), "PRIVATE KEY", kd)
}

func readPEM(path, typ string) []byte {
	data, err := os.ReadFile(path)
	must(err, "read "+path)
	b, _ := pem.Decode(data)
	if b == nil || b.Type != typ {
		fail(path + ": no " + typ + " PEM block")
	}
	return b.Bytes
}

func writePEM(path, typ string, der []byte) {
	must(os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600), "write "+path)
}
