package state

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"
)

// GatewayParametersGroup and GatewayParametersKind name the CoxswainGatewayParameters resource.
const (
	GatewayParametersGroup = "gateway.coxswain.dev"
	GatewayParametersKind  = "CoxswainGatewayParameters"
)

// Decode reads a multi-document YAML stream of Kubernetes objects into a ClusterState. Every
// document is decoded strictly: an unknown field or an unsupported kind is an error.
// CoxswainGatewayParameters documents keep only their metadata.
func Decode(r io.Reader) (*ClusterState, error) {
	cs := New()
	reader := utilyaml.NewYAMLReader(bufio.NewReader(r))
	for i := 0; ; i++ {
		doc, err := reader.Read()
		if errors.Is(err, io.EOF) {
			return cs, nil
		}
		if err != nil {
			return nil, fmt.Errorf("read document %d: %w", i, err)
		}
		if len(bytes.TrimSpace(doc)) == 0 {
			continue
		}
		if err := cs.add(doc); err != nil {
			return nil, fmt.Errorf("decode document %d: %w", i, err)
		}
	}
}

func (cs *ClusterState) add(doc []byte) error {
	var tm metav1.TypeMeta
	if err := yaml.Unmarshal(doc, &tm); err != nil {
		return err
	}
	switch tm.Kind {
	case "":
		return skipEmpty(doc)
	case "GatewayClass":
		return decodeInto(doc, cs.GatewayClasses)
	case "Gateway":
		return decodeInto(doc, cs.Gateways)
	case "HTTPRoute":
		return decodeInto(doc, cs.HTTPRoutes)
	case "GRPCRoute":
		return decodeInto(doc, cs.GRPCRoutes)
	case "TLSRoute":
		return decodeInto(doc, cs.TLSRoutes)
	case "TCPRoute":
		return decodeInto(doc, cs.TCPRoutes)
	case "UDPRoute":
		return decodeInto(doc, cs.UDPRoutes)
	case "ListenerSet":
		return decodeInto(doc, cs.ListenerSets)
	case "ReferenceGrant":
		return decodeInto(doc, cs.ReferenceGrants)
	case "BackendTLSPolicy":
		return decodeInto(doc, cs.BackendTLSPolicies)
	case "ConfigMap":
		return decodeInto(doc, cs.ConfigMaps)
	case "Service":
		return decodeInto(doc, cs.Services)
	case "EndpointSlice":
		return decodeInto(doc, cs.EndpointSlices)
	case "Secret":
		return decodeInto(doc, cs.Secrets)
	case "Namespace":
		return decodeInto(doc, cs.Namespaces)
	case GatewayParametersKind:
		return cs.addParameters(doc)
	}
	return fmt.Errorf("unsupported kind %q", tm.Kind)
}

// object is the constraint of decodeInto: a pointer to a Kubernetes API type.
type object[T any] interface {
	*T
	metav1.Object
}

func decodeInto[T any, P object[T]](doc []byte, into map[types.NamespacedName]P) error {
	obj := P(new(T))
	if err := yaml.UnmarshalStrict(doc, obj); err != nil {
		return err
	}
	key := Key(obj)
	if _, dup := into[key]; dup {
		return fmt.Errorf("duplicate object %s", key)
	}
	into[key] = obj
	return nil
}

func (cs *ClusterState) addParameters(doc []byte) error {
	obj := &metav1.PartialObjectMetadata{}
	if err := yaml.Unmarshal(doc, obj); err != nil {
		return err
	}
	cs.GatewayParameters[Key(obj)] = obj
	return nil
}

// skipEmpty accepts a document with no content (only comments) and rejects one without a kind.
func skipEmpty(doc []byte) error {
	var content any
	if err := yaml.Unmarshal(doc, &content); err != nil {
		return err
	}
	if content != nil {
		return errors.New("document has no kind")
	}
	return nil
}
