package admin

import (
	"bytes"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"errors"
	"math/big"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
	"google.golang.org/protobuf/types/known/anypb"

	discoveryv1 "coxswain.dev/coxswain/discovery/api/v1"
	"coxswain.dev/coxswain/discovery/server/cache"
	"coxswain.dev/coxswain/proxy/internal/dataplane/snaptest"
	"coxswain.dev/coxswain/proxy/internal/resource"
)

// protocolFields yields every field of every message of the discovery protocol, nested ones too.
func protocolFields(t *testing.T) []protoreflect.FieldDescriptor {
	t.Helper()
	var out []protoreflect.FieldDescriptor
	var walk func(protoreflect.MessageDescriptors)
	walk = func(mds protoreflect.MessageDescriptors) {
		for i := range mds.Len() {
			md := mds.Get(i)
			for j := range md.Fields().Len() {
				out = append(out, md.Fields().Get(j))
			}
			walk(md.Messages())
		}
	}
	protoregistry.GlobalFiles.RangeFilesByPackage("coxswain.discovery.v1", func(fd protoreflect.FileDescriptor) bool {
		walk(fd.Messages())
		return true
	})
	if len(out) == 0 {
		t.Fatal("no message of package coxswain.discovery.v1 is registered")
	}
	return out
}

func names(fields []protoreflect.FieldDescriptor, keep func(protoreflect.FieldDescriptor) bool) []string {
	var out []string
	for _, fd := range fields {
		if keep(fd) {
			out = append(out, string(fd.FullName()))
		}
	}
	slices.Sort(out)
	return out
}

func stringsOrBytes(fd protoreflect.FieldDescriptor) bool {
	k := fd.Kind()
	return k == protoreflect.StringKind || k == protoreflect.BytesKind || k == protoreflect.MessageKind
}

// Tests that the fields the admin port redacts by name are these. A field added to the
// protocol whose name says key, private, secret, token, password or credential is redacted
// already; this test fails to make its author look: keep it here if it is secret, or put it in
// publicFields with why if it is not.
func TestRedactedFields(t *testing.T) {
	t.Parallel()
	got := names(protocolFields(t), func(fd protoreflect.FieldDescriptor) bool { return stringsOrBytes(fd) && secretField(fd) })
	want := []string{
		"coxswain.discovery.v1.BackendTLS.client_private_key_pem",
		"coxswain.discovery.v1.BootstrapRequest.token",
		"coxswain.discovery.v1.Certificate.private_key_pem",
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("the fields redacted by name changed (-want +got): keep a secret one in this list, or put one that is not in publicFields with why:\n%s", diff)
	}
	for name := range publicFields {
		if _, err := protoregistry.GlobalFiles.FindDescriptorByName(name); err != nil {
			t.Errorf("publicFields names %s, which the protocol does not have: %v", name, err)
		}
	}
}

// Tests that every bytes field the admin port shows is one reviewed as public (certificates,
// CA bundles, a CSR): bytes are where key material travels, so a new bytes field must be
// looked at even when its name says nothing (its value is still redacted when it holds a PEM
// private key).
func TestShownBytesFieldsArePublic(t *testing.T) {
	t.Parallel()
	got := names(protocolFields(t), func(fd protoreflect.FieldDescriptor) bool {
		return fd.Kind() == protoreflect.BytesKind && !secretField(fd)
	})
	want := []string{
		"coxswain.discovery.v1.BackendTLS.ca_certificates_pem",
		"coxswain.discovery.v1.BackendTLS.client_certificate_chain_pem",
		"coxswain.discovery.v1.BootstrapRequest.csr",
		"coxswain.discovery.v1.BootstrapResponse.svid_chain_pem",
		"coxswain.discovery.v1.BootstrapResponse.trust_bundle_pem",
		"coxswain.discovery.v1.Certificate.certificate_chain_pem",
		"coxswain.discovery.v1.ClientValidation.ca_certificates_pem",
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("the bytes fields shown changed (-want +got): a field that may hold a key needs a secret word in its name or an entry in redact.go:\n%s", diff)
	}
}

// keyPair is a certificate chain and its private key, PEM.
type keyPair struct{ chain, key []byte }

// rsaPair returns a self-signed RSA certificate with its PKCS#1 key ("RSA PRIVATE KEY").
func rsaPair(t *testing.T) keyPair {
	t.Helper()
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "client"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	return keyPair{
		chain: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		key:   pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(key)}),
	}
}

// requireNoKey fails when out holds any form of the PEM private key keyPEM: the PEM, its base64
// (as protojson writes bytes) in every alphabet, the DER, its base64, or any line of the PEM's
// body.
func requireNoKey(t *testing.T, out, keyPEM []byte) {
	t.Helper()
	block, _ := pem.Decode(keyPEM)
	if block == nil {
		t.Fatal("not a PEM key")
	}
	forms := map[string][]byte{"PEM": keyPEM, "DER": block.Bytes, "PEM header": []byte("PRIVATE KEY")}
	for name, enc := range map[string]*base64.Encoding{
		"std": base64.StdEncoding, "raw std": base64.RawStdEncoding, "url": base64.URLEncoding, "raw url": base64.RawURLEncoding,
	} {
		forms["base64 "+name+" of the PEM"] = []byte(enc.EncodeToString(keyPEM))
		forms["base64 "+name+" of the DER"] = []byte(enc.EncodeToString(block.Bytes))
	}
	for i, line := range bytes.Split(keyPEM, []byte("\n")) {
		if len(line) >= 16 && !bytes.HasPrefix(line, []byte("-----")) {
			forms["PEM body line "+string(rune('0'+i%10))] = line
		}
	}
	for name, form := range forms {
		if bytes.Contains(out, form) {
			t.Errorf("the output holds the private key (%s)", name)
		}
	}
}

// appliedSet returns the set of msgs at their content hash, applied at a fixed time.
func appliedSet(t *testing.T, resources ...*discoveryv1.Resource) *Applied {
	t.Helper()
	hashed, err := cache.NewSnapshot(resources, time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	set, err := resource.NewSet(hashed.Version(), resources)
	if err != nil {
		t.Fatal(err)
	}
	return &Applied{Set: set, At: time.Date(2026, 12, 2, 16, 30, 0, 0, time.UTC)}
}

// view is the JSON of /snapshot, decoded.
type view struct {
	Version       string    `json:"version"`
	Hash          string    `json:"hash"`
	AppliedAt     time.Time `json:"appliedAt"`
	ResourceCount int       `json:"resourceCount"`
	Resources     []struct {
		Key   string         `json:"key"`
		Type  string         `json:"type"`
		Value map[string]any `json:"value"`
		Error string         `json:"error"`
	} `json:"resources"`
}

func decode(t *testing.T, out []byte) view {
	t.Helper()
	var v view
	if err := json.Unmarshal(out, &v); err != nil {
		t.Fatalf("decode %s: %v", out, err)
	}
	return v
}

// Tests that the snapshot's JSON shows the listener's certificate chain and the backend's
// client certificate chain but neither private key (ECDSA PKCS#8 and RSA PKCS#1), in any form,
// and says "[redacted]" where they were; a key field is redacted by its name, whatever it holds
// (DER, not PEM, in a second certificate).
func TestSnapshotRedactsPrivateKeys(t *testing.T) {
	t.Parallel()
	cert, _ := snaptest.Certificate(t, "ns/cert", "app.example.com")
	client := rsaPair(t)
	cluster := snaptest.Cluster(t, "ns/app:443", "10.0.0.1:8443")
	cluster.Tls = &discoveryv1.BackendTLS{
		ServerName: "app.ns.svc", CaCertificatesPem: cert.GetCertificateChainPem(),
		ClientCertificateChainPem: client.chain, ClientPrivateKeyPem: client.key,
	}
	vh := snaptest.VHost("web", "app.example.com", snaptest.Route("ns/web/0/0", "", snaptest.Prefix("/"), "ns/app:443"))
	vh.Certificates = []string{"ns/cert"}
	der, _ := snaptest.Certificate(t, "ns/der", "der.example.com")
	derKey := der.GetPrivateKeyPem()
	block, _ := pem.Decode(derKey)
	der.PrivateKeyPem = block.Bytes
	a := appliedSet(t, snaptest.Resources(t, snaptest.Listener("ns/gw", 443, discoveryv1.Protocol_PROTOCOL_HTTPS, vh), cert, der, cluster)...)

	out, err := renderSnapshot(a, "")
	if err != nil {
		t.Fatal(err)
	}
	requireNoKey(t, out, cert.GetPrivateKeyPem())
	requireNoKey(t, out, client.key)
	requireNoKey(t, out, derKey)
	if n := bytes.Count(out, []byte(`"[redacted]"`)); n != 3 {
		t.Errorf("%d redacted values, want the 3 keys", n)
	}
	v := decode(t, out)
	if v.Version != a.Set.Version() || v.Hash != v.Version || v.ResourceCount != 4 || len(v.Resources) != 4 || !v.AppliedAt.Equal(a.At) {
		t.Fatalf("version %s hash %s count %d resources %d applied %s, want version and hash %s, 4 resources, applied %s",
			v.Version, v.Hash, v.ResourceCount, len(v.Resources), v.AppliedAt, a.Set.Version(), a.At)
	}
	chain := base64.StdEncoding.EncodeToString(cert.GetCertificateChainPem())
	byKey := map[string]map[string]any{}
	for _, r := range v.Resources {
		byKey[r.Key] = r.Value
	}
	if c := byKey["certificate/ns/cert"]; c["certificateChainPem"] != chain || c["privateKeyPem"] != Redacted || c["name"] != "ns/cert" {
		t.Errorf("certificate %v, want its chain and a redacted key", c)
	}
	if c := byKey["certificate/ns/der"]; c["privateKeyPem"] != Redacted {
		t.Errorf("certificate with a DER key %v, want the key redacted", c)
	}
	tls, _ := byKey["cluster/ns/app:443"]["tls"].(map[string]any)
	if tls["clientCertificateChainPem"] != base64.StdEncoding.EncodeToString(client.chain) || tls["clientPrivateKeyPem"] != Redacted ||
		tls["caCertificatesPem"] != chain || tls["serverName"] != "app.ns.svc" {
		t.Errorf("backend TLS %v, want its chains and a redacted key", tls)
	}
	if l := byKey["listener/ns/gw/443"]; l["port"] != float64(443) || l["protocol"] != "PROTOCOL_HTTPS" {
		t.Errorf("listener %v", l)
	}
}

// Tests that a PEM private key is redacted wherever it hides: in a bytes field whose name says
// nothing (a CA bundle a key was pasted into), in a string field, in a field this proxy does
// not know (a newer controller's), inside an Any, and in a payload of a type unknown to this
// proxy, which is not shown at all.
func TestSnapshotRedactsKeysAnywhere(t *testing.T) {
	t.Parallel()
	cert, _ := snaptest.Certificate(t, "ns/cert", "app.example.com")
	key := cert.GetPrivateKeyPem()

	pasted := snaptest.HTTP("ns/gw", 443)
	pasted.ClientValidation = &discoveryv1.ClientValidation{CaCertificatesPem: slices.Concat(cert.GetCertificateChainPem(), key)}
	named := snaptest.Cluster(t, "ns/app:80", "10.0.0.1:80")
	named.Endpoints[0].Address = string(key)
	resources := snaptest.Resources(t, pasted, named)

	// A newer controller's field 99 of a Certificate, unknown here, holding the key.
	newer, err := proto.Marshal(&discoveryv1.Certificate{Name: "ns/newer"})
	if err != nil {
		t.Fatal(err)
	}
	newer = protowire.AppendBytes(protowire.AppendTag(newer, 99, protowire.BytesType), key)
	resources = append(resources, &discoveryv1.Resource{Key: "certificate/ns/newer", Payload: &anypb.Any{
		TypeUrl: "type.googleapis.com/coxswain.discovery.v1.Certificate", Value: newer,
	}})
	wrapped, err := anypb.New(cert)
	if err != nil {
		t.Fatal(err)
	}
	nested, err := anypb.New(wrapped)
	if err != nil {
		t.Fatal(err)
	}
	resources = append(resources,
		&discoveryv1.Resource{Key: "nested/ns/cert", Payload: nested},
		&discoveryv1.Resource{Key: "future/ns/thing", Payload: &anypb.Any{TypeUrl: "type.googleapis.com/coxswain.discovery.v2.Thing", Value: key}},
	)

	out, err := renderSnapshot(appliedSet(t, resources...), "")
	if err != nil {
		t.Fatal(err)
	}
	requireNoKey(t, out, key)
	v := decode(t, out)
	got := map[string]string{}
	for _, r := range v.Resources {
		b, err := json.Marshal(r.Value)
		if err != nil {
			t.Fatal(err)
		}
		got[r.Key] = r.Type + " " + string(b) + " " + r.Error
	}
	want := map[string]string{
		"listener/ns/gw/443":   `coxswain.discovery.v1.Listener {"clientValidation":{"caCertificatesPem":"[redacted]"},"name":"ns/gw/443","port":443,"protocol":"PROTOCOL_HTTP"} `,
		"cluster/ns/app:80":    `coxswain.discovery.v1.Cluster {"endpoints":[{"address":"[redacted]","port":80}],"name":"ns/app:80"} `,
		"certificate/ns/newer": `coxswain.discovery.v1.Certificate {"name":"ns/newer"} `,
		"nested/ns/cert": `google.protobuf.Any {"@type":"type.googleapis.com/coxswain.discovery.v1.Certificate","certificateChainPem":"` +
			base64.StdEncoding.EncodeToString(cert.GetCertificateChainPem()) + `","name":"ns/cert","privateKeyPem":"[redacted]"} `,
		"future/ns/thing": "coxswain.discovery.v2.Thing null not shown: the type is unknown to this proxy",
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("resources (-want +got):\n%s", diff)
	}
}

// Tests that one resource is shown by its key, and that a key the set does not hold is an error.
func TestSnapshotOneResource(t *testing.T) {
	t.Parallel()
	cert, _ := snaptest.Certificate(t, "ns/cert", "app.example.com")
	a := appliedSet(t, snaptest.Resources(t, cert, snaptest.Cluster(t, "ns/app:80", "10.0.0.1:80"))...)
	out, err := renderSnapshot(a, "cluster/ns/app:80")
	if err != nil {
		t.Fatal(err)
	}
	if v := decode(t, out); v.ResourceCount != 2 || len(v.Resources) != 1 || v.Resources[0].Key != "cluster/ns/app:80" {
		t.Errorf("count %d, resources %+v, want the cluster of 2", v.ResourceCount, v.Resources)
	}
	if _, err := renderSnapshot(a, "cluster/ns/other:80"); !errors.Is(err, errNoSuchResource) || !strings.Contains(err.Error(), a.Set.Version()) {
		t.Errorf("an absent key: %v, want %v naming the version", err, errNoSuchResource)
	}
}
