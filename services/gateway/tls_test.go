package main

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"go.opentelemetry.io/collector/pdata/pprofile"
	"go.opentelemetry.io/collector/pdata/pprofile/pprofileotlp"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	"github.com/profsym/profsym/pkg/otlpprofiles/otlptest"
)

// writePEM writes one PEM block to dir/name and returns the path.
func writePEM(t *testing.T, dir, name, typ string, der []byte) string {
	t.Helper()
	path := filepath.Join(dir, name)
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// testPKI writes a server certificate for 127.0.0.1 with its key and a CA for clients, and
// returns their paths, a pool that trusts the server and a client certificate the CA signed.
func testPKI(t *testing.T) (certPath, keyPath, caPath string, servers *x509.CertPool, client tls.Certificate) {
	t.Helper()
	dir := t.TempDir()
	newKey := func() *ecdsa.PrivateKey {
		k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			t.Fatal(err)
		}
		return k
	}
	create := func(tmpl, parent *x509.Certificate, pub *ecdsa.PublicKey, signer *ecdsa.PrivateKey) []byte {
		der, err := x509.CreateCertificate(rand.Reader, tmpl, parent, pub, signer)
		if err != nil {
			t.Fatal(err)
		}
		return der
	}
	window := func(c *x509.Certificate) *x509.Certificate {
		c.NotBefore, c.NotAfter = time.Now().Add(-time.Hour), time.Now().Add(time.Hour)
		return c
	}

	srvKey := newKey()
	srvTmpl := window(&x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "gateway-test"},
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, KeyUsage: x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}})
	srvDER := create(srvTmpl, srvTmpl, &srvKey.PublicKey, srvKey)
	kder, err := x509.MarshalECPrivateKey(srvKey)
	if err != nil {
		t.Fatal(err)
	}
	certPath = writePEM(t, dir, "cert.pem", "CERTIFICATE", srvDER)
	keyPath = writePEM(t, dir, "key.pem", "EC PRIVATE KEY", kder)
	srvCert, err := x509.ParseCertificate(srvDER)
	if err != nil {
		t.Fatal(err)
	}
	servers = x509.NewCertPool()
	servers.AddCert(srvCert)

	caKey := newKey()
	caTmpl := window(&x509.Certificate{SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "collectors-ca"},
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign})
	caDER := create(caTmpl, caTmpl, &caKey.PublicKey, caKey)
	caCert, err := x509.ParseCertificate(caDER)
	if err != nil {
		t.Fatal(err)
	}
	caPath = writePEM(t, dir, "clients-ca.pem", "CERTIFICATE", caDER)
	cliKey := newKey()
	cliTmpl := window(&x509.Certificate{SerialNumber: big.NewInt(3), Subject: pkix.Name{CommonName: "collector"},
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}})
	client = tls.Certificate{Certificate: [][]byte{create(cliTmpl, caCert, &cliKey.PublicKey, caKey)}, PrivateKey: cliKey}
	return certPath, keyPath, caPath, servers, client
}

// TestMutualTLSReceivers: with receivers::otlp::protocols::*::tls::client_ca_file both receivers
// take profiles only from clients that show a certificate the CA signed (the old --tls-cert,
// --tls-key and --tls-client-ca); the production gateway is reachable by any pod, so a
// certificate is what admits one.
func TestMutualTLSReceivers(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the gateway, the symbolizer and a downstream")
	}
	certPath, keyPath, caPath, servers, clientCert := testPKI(t)
	b, sym, sk := startWithOneBinary(t)
	g := startGateway(t, gwConfig{Symbolizer: sym.URL(), Downstream: sk.addr, TLSCert: certPath, TLSKey: keyPath, TLSClientCA: caPath})
	pd, cases := otlptest.BuildRequest(t, otlptest.ShapeEBPF, b)
	body, err := (&pprofile.ProtoMarshaler{}).MarshalProfiles(pd)
	if err != nil {
		t.Fatal(err)
	}

	export := func(certs []tls.Certificate) error {
		cc, err := grpc.NewClient(g.grpcAddr, grpc.WithTransportCredentials(credentials.NewTLS(&tls.Config{RootCAs: servers, Certificates: certs})))
		if err != nil {
			t.Fatal(err)
		}
		defer cc.Close()
		ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
		defer cancel()
		_, err = pprofileotlp.NewGRPCClient(cc).Export(ctx, pprofileotlp.NewExportRequestFromProfiles(pd))
		return err
	}
	post := func(certs []tls.Certificate) (int, error) {
		hc := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: servers, Certificates: certs}}}
		req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, "https://"+g.httpAddr+"/v1development/profiles", bytes.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Content-Type", "application/x-protobuf")
		resp, err := hc.Do(req)
		if err != nil {
			return 0, err
		}
		resp.Body.Close()
		return resp.StatusCode, nil
	}

	if err := export(nil); err == nil {
		t.Error("gRPC without a client certificate was accepted")
	}
	if code, err := post(nil); err == nil {
		t.Errorf("HTTP without a client certificate answered %d; want the handshake refused", code)
	}
	if err := export([]tls.Certificate{clientCert}); err != nil {
		t.Fatalf("gRPC with a client certificate: %v", err)
	}
	if code, err := post([]tls.Certificate{clientCert}); err != nil || code != http.StatusOK {
		t.Fatalf("HTTP with a client certificate: %d, %v", code, err)
	}
	sk.settle(t, 2*int64(len(cases)), 30*time.Second)
}
