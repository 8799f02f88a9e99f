package rebuild

import (
	"maps"
	"reflect"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	gwapiv1 "sigs.k8s.io/gateway-api/apis/v1"

	"coxswain.dev/coxswain/internal/graph"
	"coxswain.dev/coxswain/internal/state"
)

// seen is what the last rebuild read: the object of every key of every kind (the objects
// themselves are never modified, by the pipeline or by Load's callers), and the graph options.
type seen struct {
	opts     graph.Options
	gateways objects[*gwapiv1.Gateway]
	routes   objects[*gwapiv1.HTTPRoute]
	services objects[*corev1.Service]
	// others holds every other kind of ClusterState but the ignored ones, by field name.
	others map[string]map[types.NamespacedName]metav1.Object
}

// Kinds of ClusterState by how the diff treats them. Gateways, HTTPRoutes and Services are
// compared by type and their changes invalidate what they affect; EndpointSlices and Deployments
// are not compared (no memo needs to be told: a cluster is handed on only while its Service and
// EndpointSlices are the very same objects, and proxies' Deployments only feed status); any
// change to any other kind, including one added to ClusterState after this was written, starts
// every memo over.
var (
	typedKinds   = map[string]bool{"Gateways": true, "HTTPRoutes": true, "Services": true}
	ignoredKinds = map[string]bool{"EndpointSlices": true, "Deployments": true}
)

func seenOf(cs *state.ClusterState, opts graph.Options) *seen {
	opts.Routes = nil
	s := &seen{
		opts:     opts,
		gateways: objectsOf(cs.Gateways),
		routes:   objectsOf(cs.HTTPRoutes),
		services: objectsOf(cs.Services),
		others:   map[string]map[types.NamespacedName]metav1.Object{},
	}
	eachOtherKind(cs, func(kind string, objects reflect.Value) {
		if !objects.IsValid() {
			return
		}
		m := make(map[types.NamespacedName]metav1.Object, objects.Len())
		for it := objects.MapRange(); it.Next(); {
			m[it.Key().Interface().(types.NamespacedName)] = it.Value().Interface().(metav1.Object)
		}
		s.others[kind] = m
	})
	return s
}

var (
	keyType    = reflect.TypeFor[types.NamespacedName]()
	objectType = reflect.TypeFor[metav1.Object]()
)

// eachOtherKind calls f with every map of cs that is neither typed nor ignored. A field that is
// not a map of objects by namespace/name is passed as an invalid Value, which counts as changed.
func eachOtherKind(cs *state.ClusterState, f func(kind string, objects reflect.Value)) {
	v := reflect.ValueOf(cs).Elem()
	for i := range v.NumField() {
		kind := v.Type().Field(i).Name
		if typedKinds[kind] || ignoredKinds[kind] {
			continue
		}
		field := v.Field(i)
		if !isObjectMap(field.Type()) {
			field = reflect.Value{}
		}
		f(kind, field)
	}
}

func isObjectMap(t reflect.Type) bool {
	return t.Kind() == reflect.Map && t.Key() == keyType && t.Elem().Implements(objectType)
}

// othersChanged reports whether any object of the other kinds was created, changed or deleted.
func (prev *seen) othersChanged(cs *state.ClusterState) bool {
	changed := false
	eachOtherKind(cs, func(kind string, objects reflect.Value) {
		old, ok := prev.others[kind]
		if changed || !ok || !objects.IsValid() || len(old) != objects.Len() {
			changed = true
			return
		}
		for it := objects.MapRange(); it.Next(); {
			o, ok := old[it.Key().Interface().(types.NamespacedName)]
			if !ok || !sameObject(o, it.Value().Interface().(metav1.Object)) {
				changed = true
				return
			}
		}
	})
	return changed
}

// changes says what a rebuild's state changed since the last one, for the compile memos.
// EndpointSlices and Deployments are not looked at: no memo needs to be told of them (a cluster is
// handed on only while its objects are the same; proxies' Deployments only feed status).
type changes struct {
	// all is true when a change may affect what the graph says about any route: the memos of
	// every scope start over.
	all bool
	// gateways are the Gateways created, changed or deleted: the memos of the scopes that served
	// them before or serve them now start over.
	gateways []types.NamespacedName
	// routes are the HTTPRoutes created, changed or deleted, and those whose backendRefs name a
	// Service that was: each is compiled again wherever it attaches.
	routes map[types.NamespacedName]bool
	// services are the Services created, changed or deleted.
	services []types.NamespacedName
}

// update makes seen what a rebuild of cs with the changes c read: a copy of cs when c.all,
// otherwise only the changed Gateways, routes and Services are replaced, the other kinds being
// unchanged.
func (prev *seen) update(cs *state.ClusterState, opts graph.Options, c changes) *seen {
	if prev == nil || c.all {
		return seenOf(cs, opts)
	}
	prev.gateways.set(cs.Gateways, c.gateways...)
	prev.services.set(cs.Services, c.services...)
	for key := range c.routes {
		prev.routes.set(cs.HTTPRoutes, key)
	}
	return prev
}

// objects holds the objects of one kind a rebuild read, by key and by identity: every object is
// kept under its own namespace/name, and an object is replaced when it changes, never modified,
// so finding the very object among those read before says it did not change, without hashing
// its key.
type objects[P comparable] struct {
	byKey map[types.NamespacedName]P
	ids   map[P]struct{}
}

func objectsOf[P comparable](m map[types.NamespacedName]P) objects[P] {
	o := objects[P]{byKey: maps.Clone(m), ids: make(map[P]struct{}, len(m))}
	for _, obj := range m {
		o.ids[obj] = struct{}{}
	}
	if o.byKey == nil {
		o.byKey = map[types.NamespacedName]P{}
	}
	return o
}

// set copies the objects under keys from next, deleting those next does not hold.
func (o objects[P]) set(next map[types.NamespacedName]P, keys ...types.NamespacedName) {
	for _, key := range keys {
		if old, ok := o.byKey[key]; ok {
			delete(o.ids, old)
		}
		if obj, ok := next[key]; ok {
			o.byKey[key] = obj
			o.ids[obj] = struct{}{}
		} else {
			delete(o.byKey, key)
		}
	}
}

// diff compares cs and opts with what the last rebuild read; prev nil means there was none.
func (prev *seen) diff(cs *state.ClusterState, opts graph.Options) changes {
	opts.Routes = nil
	if prev == nil || prev.opts != opts || prev.othersChanged(cs) {
		return changes{all: true}
	}
	c := changes{gateways: changed(prev.gateways, cs.Gateways), routes: map[types.NamespacedName]bool{}}
	for _, key := range changed(prev.routes, cs.HTTPRoutes) {
		c.routes[key] = true
	}
	c.services = changed(prev.services, cs.Services)
	if services := c.services; len(services) > 0 {
		touched := map[types.NamespacedName]bool{}
		for _, key := range services {
			touched[key] = true
		}
		// GRPCRoutes are not compared by type (any change of one starts every memo over), so
		// a Service one of them names changing does too.
		for key, r := range cs.GRPCRoutes {
			refs := References{services: map[types.NamespacedName]bool{}}
			refs.addGRPCRoute(key.Namespace, r)
			for svc := range refs.services {
				if touched[svc] {
					return changes{all: true}
				}
			}
		}
		for _, routes := range []map[types.NamespacedName]*gwapiv1.HTTPRoute{prev.routes.byKey, cs.HTTPRoutes} {
			for key, r := range routes {
				if !c.routes[key] && referencesAny(key.Namespace, r, touched) {
					c.routes[key] = true
				}
			}
		}
	}
	return c
}

// referencesAny reports whether a route names one of services in a backendRef or mirror.
func referencesAny(namespace string, r *gwapiv1.HTTPRoute, services map[types.NamespacedName]bool) bool {
	refs := References{services: map[types.NamespacedName]bool{}}
	refs.addRoute(namespace, r)
	for key := range refs.services {
		if services[key] {
			return true
		}
	}
	return false
}

// changed returns the keys created, deleted or changed between the objects read before and a
// map of the same kind. An object is unchanged when it is the same object, or has the same UID
// and resourceVersion, or (objects decoded from files, without resourceVersion) is deeply equal.
func changed[T any, P interface {
	*T
	metav1.Object
}](prev objects[P], next map[types.NamespacedName]P) []types.NamespacedName {
	var out []types.NamespacedName
	found := 0
	for key, n := range next {
		if _, ok := prev.ids[n]; ok {
			found++ // the very object read before, under its own key
			continue
		}
		p, ok := prev.byKey[key]
		if ok {
			found++
		}
		if !ok || !sameObject(metav1.Object(p), metav1.Object(n)) {
			out = append(out, key)
		}
	}
	if found == len(prev.byKey) {
		return out // every key of prev is in next: none was deleted
	}
	for key := range prev.byKey {
		if _, ok := next[key]; !ok {
			out = append(out, key)
		}
	}
	return out
}

func sameObject(a, b metav1.Object) bool {
	if a == b {
		return true
	}
	if a.GetResourceVersion() != "" || b.GetResourceVersion() != "" {
		return a.GetResourceVersion() == b.GetResourceVersion() && a.GetUID() == b.GetUID()
	}
	return equality.Semantic.DeepEqual(a, b)
}
