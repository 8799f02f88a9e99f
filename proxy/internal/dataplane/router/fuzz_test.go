package router_test

import (
	"testing"

	"google.golang.org/protobuf/proto"

	discoveryv1 "coxswain.dev/coxswain/discovery/api/v1"
	"coxswain.dev/coxswain/proxy/internal/dataplane/router"
	"coxswain.dev/coxswain/proxy/internal/dataplane/snaptest"
)

// FuzzCompile feeds Compile snapshots decoded from arbitrary bytes, as they arrive from the
// network: it must refuse or accept without panicking, and an accepted table must route.
func FuzzCompile(f *testing.F) {
	cert, _ := snaptest.Certificate(f, "ns/cert", "a.example.com")
	https := snaptest.Listener("ns/gw", 443, discoveryv1.Protocol_PROTOCOL_HTTPS,
		&discoveryv1.VirtualHost{Name: "https", Hostname: "*.example.com", Certificates: []string{"ns/cert"}, Routes: []*discoveryv1.Route{
			{Name: "r", Match: withHeader(snaptest.Regex("/a.*"), regex, "x", "y+"), Backends: []*discoveryv1.WeightedBackend{{Cluster: "ns/app:80", Weight: 2}}},
		}})
	filtered := snaptest.Route("ns/filtered/0/0", "", snaptest.Prefix("/f"), "ns/app:80")
	filtered.Filters = []*discoveryv1.Filter{{Kind: &discoveryv1.Filter_Cors{Cors: &discoveryv1.Cors{
		AllowOrigins: []string{"https://*.example.com"}, AllowMethods: []string{"GET"}, AllowHeaders: []string{"*"}, AllowCredentials: true,
	}}}}
	filtered.Backends[0].Filters = []*discoveryv1.Filter{{Kind: &discoveryv1.Filter_RequestHeaders{RequestHeaders: &discoveryv1.HeaderModifier{
		Set: []*discoveryv1.Header{{Name: "Backend", Value: "app"}},
	}}}}
	seeds := [][]proto.Message{
		{snaptest.HTTP("ns/gw", 80, snaptest.VHost("http", "", filtered)), snaptest.Cluster(f, "ns/app:80", "10.0.0.1:80")},
		{snaptest.HTTP("ns/gw", 80, snaptest.VHost("http", "", snaptest.ScaleRoutes(20, "ns/app:80")...)), snaptest.Cluster(f, "ns/app:80", "10.0.0.1:80")},
		{https, cert},
	}
	for _, s := range seeds {
		raw, err := proto.Marshal(&discoveryv1.Snapshot{Full: true, Resources: snaptest.Resources(f, s...)})
		if err != nil {
			f.Fatal(err)
		}
		f.Add(raw)
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		var snap discoveryv1.Snapshot
		if err := proto.Unmarshal(raw, &snap); err != nil {
			return
		}
		table, err := router.Compile(snaptest.Seq(snap.GetResources()))
		if err != nil {
			return
		}
		for _, p := range table.Ports() {
			for _, vh := range p.VirtualHosts() {
				vh.Match("a.example.com", "GET", "/a/b", request{})
			}
			p.CertificateVirtualHost("a.example.com")
		}
	})
}
