package wellknown

import (
	"crypto/sha256"
	"encoding/hex"
	"strings"
)

// MaxNameLength is the longest name DedicatedProxyName returns: a DNS-1035 label, which every
// kind it names (ServiceAccount, Deployment, Service) accepts.
const MaxNameLength = 63

// nameHashLength is the number of hex digits of the hash a shortened name ends with.
const nameHashLength = 8

// sharedNameHashLength is the number of hex digits of the hash every SharedGatewayServiceName
// ends with: 64 bits, so that no tenant can search offline for a Gateway name whose Service
// name is another tenant's (32 bits take minutes).
const sharedNameHashLength = 16

// DedicatedProxyName is the name of the ServiceAccount, Deployment and Service of a Gateway's
// dedicated proxy (GEP-1762): "<gateway>-<gatewayclass>", made a DNS-1035 label. Dots become
// dashes and a name that does not start with a letter gets the prefix "gw-"; a name longer than
// MaxNameLength is cut and ends with "-" and a short hash of the whole name, so two long names
// that differ only in their tail stay apart. It is deterministic: the bootstrap allowlist, the
// stream scope authority and the provisioner all call it and so always agree. Two Gateways can
// still map to one name ("a.b" and "a-b"); the graph refuses all but the oldest.
func DedicatedProxyName(gateway, gatewayClass string) string {
	return ShortName(gateway + "-" + gatewayClass)
}

// ShortName makes name a DNS-1035 label of at most MaxNameLength characters, as
// DedicatedProxyName describes.
func ShortName(name string) string {
	name = strings.ToLower(strings.ReplaceAll(name, ".", "-"))
	if name == "" || name[0] < 'a' || name[0] > 'z' {
		name = "gw-" + name
	}
	if len(name) <= MaxNameLength {
		return name
	}
	sum := sha256.Sum256([]byte(name))
	head := strings.TrimRight(name[:MaxNameLength-nameHashLength-1], "-")
	return head + "-" + hex.EncodeToString(sum[:])[:nameHashLength]
}

// LabelValue makes value fit a label value (at most 63 characters) the way ShortName shortens a
// name: cut, then "-" and a short hash of the whole value. A value that fits is kept as it is.
func LabelValue(value string) string {
	if len(value) <= MaxNameLength {
		return value
	}
	sum := sha256.Sum256([]byte(value))
	head := strings.TrimRight(value[:MaxNameLength-nameHashLength-1], "-.")
	return head + "-" + hex.EncodeToString(sum[:])[:nameHashLength]
}

// SharedGatewayServiceName is the name of the Service, in the operator's namespace, that gives
// a shared pool Gateway its own address: "<namespace>-<gateway>" made a DNS-1035 label, always
// ending with "-" and 64 bits of a hash of "<namespace>/<gateway>", so that two Gateways whose
// joined names are equal ("a-b"/"c" and "a"/"b-c") still get two Services, and no Gateway name
// can be found whose Service name is another Gateway's.
func SharedGatewayServiceName(namespace, gateway string) string {
	sum := sha256.Sum256([]byte(namespace + "/" + gateway))
	head := ShortName(namespace + "-" + gateway)
	if len(head) > MaxNameLength-sharedNameHashLength-1 {
		head = strings.TrimRight(head[:MaxNameLength-sharedNameHashLength-1], "-")
	}
	return head + "-" + hex.EncodeToString(sum[:])[:sharedNameHashLength]
}
