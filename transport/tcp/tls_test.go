package tcp_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"github.com/goccl/goccl/internal/testutil"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/goccl/goccl/transport/tcp"
	"github.com/goccl/goccl/transport/transporttest"
)

// writeCert writes a self-signed certificate for 127.0.0.1 that is its own
// CA, and its key, as PEM files; it returns their paths.
func writeCert(t *testing.T, name string) (cert, key string) {
	t.Helper()
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: name},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(time.Hour),
		IPAddresses:           []net.IP{net.ParseIP("127.0.0.1")},
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &k.PublicKey, k)
	if err != nil {
		t.Fatal(err)
	}
	kd, err := x509.MarshalECPrivateKey(k)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	cert, key = filepath.Join(dir, name+".pem"), filepath.Join(dir, name+".key")
	os.WriteFile(cert, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600)
	os.WriteFile(key, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kd}), 0o600)
	return cert, key
}

func TestConformanceTLS(t *testing.T) {
	cert, key := writeCert(t, "job")
	cfg, err := tcp.TLSFromFiles(cert, key, cert)
	if err != nil {
		t.Fatal(err)
	}
	transporttest.Run(t, meshFunc(tcp.Config{TLS: cfg, Streams: 2}))
}

// A rank whose certificate the others do not trust cannot join.
func TestTLSRefusesUntrusted(t *testing.T) {
	cert, key := writeCert(t, "job")
	good, err := tcp.TLSFromFiles(cert, key, cert)
	if err != nil {
		t.Fatal(err)
	}
	ocert, okey := writeCert(t, "stranger")
	bad, err := tcp.TLSFromFiles(ocert, okey, cert) // trusts the job, but is not trusted by it
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	kv := testutil.NewKV()
	errs := make(chan error, 2)
	for r, c := range []*tcp.Config{{TLS: good}, {TLS: bad}} {
		go func() {
			c.Rank, c.Size, c.KV, c.JobID, c.ListenHost, c.Logger = r, 2, kv, "tls-job", "127.0.0.1", quiet
			c.InitTimeout = time.Second
			ep, err := tcp.Connect(ctx, *c)
			if err == nil {
				ep.Close()
			}
			errs <- err
		}()
	}
	for range 2 {
		if err := <-errs; err == nil {
			t.Fatal("a rank with an untrusted certificate joined the mesh")
		}
	}
}
