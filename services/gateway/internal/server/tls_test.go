package server_test

import (
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

	"github.com/profsym/profsym/services/gateway/internal/server"
)

// selfSigned writes a certificate for 127.0.0.1 and its key, and returns their paths and a pool
// that trusts it.
func selfSigned(t *testing.T) (certPath, keyPath string, pool *x509.CertPool) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "gateway-test"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, KeyUsage: x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	certPath, keyPath = filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	if err := os.WriteFile(certPath, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(keyPath, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder}), 0o600); err != nil {
		t.Fatal(err)
	}
	cert, _ := x509.ParseCertificate(der)
	pool = x509.NewCertPool()
	pool.AddCert(cert)
	return certPath, keyPath, pool
}

func TestTLSReceivers(t *testing.T) {
	certPath, keyPath, pool := selfSigned(t)
	sk := startSink(t)
	g := startGateway(t, server.Config{TLSCert: certPath, TLSKey: keyPath, OTLPGRPCEndpoint: sk.addr})

	cc, err := grpc.NewClient(g.grpcAddr, grpc.WithTransportCredentials(credentials.NewClientTLSFromCert(pool, "")))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	if _, err := pprofileotlp.NewGRPCClient(cc).Export(context.Background(), pprofileotlp.NewExportRequestFromProfiles(oneSample())); err != nil {
		t.Fatalf("gRPC over TLS: %v", err)
	}
	body, _ := (&pprofile.ProtoMarshaler{}).MarshalProfiles(oneSample())
	hc := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
	resp, err := post(t.Context(), hc, "https://"+g.httpAddr+"/v1development/profiles", body)
	if err != nil {
		t.Fatalf("HTTP over TLS: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("HTTP over TLS: %s", resp.Status)
	}
	sk.waitSamples(t, 2, 10*time.Second)
	// Plain HTTP to the TLS port is refused.
	if resp, err := post(t.Context(), http.DefaultClient, "http://"+g.httpAddr+"/v1development/profiles", body); err == nil {
		resp.Body.Close()
		if resp.StatusCode == 200 {
			t.Fatal("plain HTTP accepted on the TLS receiver")
		}
	}
}

func oneSample() pprofile.Profiles {
	pd := pprofile.NewProfiles()
	pd.Dictionary().StringTable().Append("")
	pd.ResourceProfiles().AppendEmpty().ScopeProfiles().AppendEmpty().Profiles().AppendEmpty().Samples().AppendEmpty().Values().Append(1)
	return pd
}

// clientCA writes a CA certificate and returns its path with a client certificate it signed.
func clientCA(t *testing.T) (caPath string, client tls.Certificate) {
	t.Helper()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	caTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "collectors-ca"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	caCert, _ := x509.ParseCertificate(caDER)
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(3), Subject: pkix.Name{CommonName: "collector"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, caCert, &key.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	caPath = filepath.Join(t.TempDir(), "clients-ca.pem")
	if err := os.WriteFile(caPath, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER}), 0o600); err != nil {
		t.Fatal(err)
	}
	return caPath, tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
}

// With a client CA both receivers take profiles only from clients that show a certificate it
// signed: the production gateway is reachable by any pod, so a certificate is what admits one.
func TestTLSReceiversRequireClientCertificate(t *testing.T) {
	certPath, keyPath, pool := selfSigned(t)
	caPath, clientCert := clientCA(t)
	sk := startSink(t)
	g := startGateway(t, server.Config{TLSCert: certPath, TLSKey: keyPath, TLSClientCA: caPath, OTLPGRPCEndpoint: sk.addr})
	body, _ := (&pprofile.ProtoMarshaler{}).MarshalProfiles(oneSample())

	export := func(certs []tls.Certificate) error {
		creds := credentials.NewTLS(&tls.Config{RootCAs: pool, Certificates: certs})
		cc, err := grpc.NewClient(g.grpcAddr, grpc.WithTransportCredentials(creds))
		if err != nil {
			t.Fatal(err)
		}
		defer cc.Close()
		ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
		defer cancel()
		_, err = pprofileotlp.NewGRPCClient(cc).Export(ctx, pprofileotlp.NewExportRequestFromProfiles(oneSample()))
		return err
	}
	postWith := func(certs []tls.Certificate) (int, error) {
		hc := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, Certificates: certs}}}
		resp, err := post(t.Context(), hc, "https://"+g.httpAddr+"/v1development/profiles", body)
		if err != nil {
			return 0, err
		}
		resp.Body.Close()
		return resp.StatusCode, nil
	}

	if err := export(nil); err == nil {
		t.Error("gRPC without a client certificate was accepted")
	}
	if code, err := postWith(nil); err == nil {
		t.Errorf("HTTP without a client certificate answered %d; want the handshake refused", code)
	}
	if err := export([]tls.Certificate{clientCert}); err != nil {
		t.Fatalf("gRPC with a client certificate: %v", err)
	}
	if code, err := postWith([]tls.Certificate{clientCert}); err != nil || code != http.StatusOK {
		t.Fatalf("HTTP with a client certificate: %d, %v", code, err)
	}
	sk.waitSamples(t, 2, 10*time.Second)
}
