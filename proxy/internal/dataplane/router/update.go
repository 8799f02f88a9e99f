package router

import (
	"bytes"
	"cmp"
	"errors"
	"fmt"
	"iter"
	"slices"
	"strings"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"

	discoveryv1 "coxswain.dev/coxswain/discovery/api/v1"
	"coxswain.dev/coxswain/discovery/routeset"
)

// Update validates a complete resource set as Compile does, and refuses exactly what Compile
// refuses, but builds its table from prev (nil for none): every compiled piece whose payload
// did not change is shared with prev, and of a listener that changed only the virtual hosts and
// routes whose encoding changed are decoded and compiled. A cluster keeps its Index across
// updates while it stays in the set, so a change of its endpoints touches no route. prev is not
// changed and may keep serving.
func Update(prev *Table, resources iter.Seq2[string, *anypb.Any]) (*Table, error) {
	if prev == nil {
		prev = &Table{}
	}
	in, err := sortResources(prev, resources)
	c := &compiler{
		prev: prev,
		table: &Table{
			listeners:    make(map[string]*compiledListener, len(in.listeners)),
			assembled:    in.assembled,
			clusterNames: make(map[string]*Cluster, len(in.clusters)),
			certificates: make(map[string]*Certificate, len(in.certificates)),
		},
		moved:        map[string]bool{},
		certsChanged: map[string]bool{},
	}
	errs := []error{err}
	errs = append(errs, c.clusters(in.clusters)...)
	errs = append(errs, c.certificateStage(in.certificates)...)
	errs = append(errs, c.listenerStage(in.listeners)...)
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	c.ports()
	return c.table, nil
}

// entry is one resource. msg is nil when prev compiled a payload equal to src under the same
// key, or, for a listener, when prev compiled an older version of it.
type entry[T proto.Message] struct {
	key, name string
	src       *anypb.Any
	msg       T
}

// sorted is a resource set sorted into its three kinds, in name order, the listeners with
// route sets assembled.
type sorted struct {
	listeners    []entry[*discoveryv1.Listener]
	clusters     []entry[*discoveryv1.Cluster]
	certificates []entry[*discoveryv1.Certificate]
	assembled    map[string]assembly
}

var listenerTypeURL = "type.googleapis.com/" + string(proto.MessageName(&discoveryv1.Listener{}))

func sortResources(prev *Table, resources iter.Seq2[string, *anypb.Any]) (*sorted, error) {
	s := &sorted{assembled: map[string]assembly{}}
	seen := map[string]bool{}
	var errs []error
	var rest []keyed
	sets := map[string][]keyed{}
	for key, payload := range resources {
		if seen[key] {
			errs = append(errs, fmt.Errorf("%w: key %q appears twice", ErrInvalid, key))
			continue
		}
		seen[key] = true
		if strings.HasPrefix(key, routeset.KeyPrefix) {
			l, vh, host, ok := routeset.ParseKey(key)
			if !ok || payload.GetTypeUrl() != routeset.TypeURL() {
				errs = append(errs, fmt.Errorf("resource %q: %w: not a route set", key, ErrInvalid))
				continue
			}
			sets[l] = append(sets[l], keyed{key: key, payload: payload, virtualHost: vh, hostname: host})
			continue
		}
		rest = append(rest, keyed{key: key, payload: payload})
	}
	for _, r := range rest {
		payload := r.payload
		if name, ok := strings.CutPrefix(r.key, ListenerKeyPrefix); ok && sets[name] != nil {
			a, err := assemble(prev, name, payload, sets[name])
			delete(sets, name)
			if err != nil {
				errs = append(errs, fmt.Errorf("resource %q: %w", r.key, err))
				continue
			}
			s.assembled[name], payload = a, a.src
		}
		if s.known(prev, r.key, payload) {
			continue
		}
		if err := s.decode(r.key, payload); err != nil {
			errs = append(errs, fmt.Errorf("resource %q: %w", r.key, err))
		}
	}
	for name, ss := range sets {
		errs = append(errs, fmt.Errorf("resource %q: %w: route set of listener %s, which the set lacks", ss[0].key, ErrInvalid, name))
	}
	slices.SortFunc(s.listeners, byName)
	slices.SortFunc(s.clusters, byName)
	slices.SortFunc(s.certificates, byName)
	return s, errors.Join(errs...)
}

// keyed is one resource of the set; a route set's with what its key names.
type keyed struct {
	key                   string
	payload               *anypb.Any
	virtualHost, hostname string
}

// assemble returns the encoding of a listener with the routes of its route sets, as one payload
// (routeset.Assemble). When the listener and its sets are the very payloads prev assembled, the
// payload prev compiled is returned, so that an unchanged listener is known without comparing
// its bytes.
func assemble(prev *Table, name string, listener *anypb.Any, sets []keyed) (assembly, error) {
	byKey := func(a, b keyed) int { return strings.Compare(a.key, b.key) }
	if !slices.IsSortedFunc(sets, byKey) {
		slices.SortFunc(sets, byKey)
	}
	inputs := make([]*anypb.Any, 0, 1+len(sets))
	inputs = append(inputs, listener)
	for _, s := range sets {
		inputs = append(inputs, s.payload)
	}
	if old, ok := prev.assembled[name]; ok && slices.Equal(old.inputs, inputs) {
		return old, nil
	}
	in := make([]routeset.Set, 0, len(sets))
	for _, s := range sets {
		in = append(in, routeset.Set{VirtualHost: s.virtualHost, Hostname: s.hostname, Payload: s.payload.GetValue()})
	}
	b, err := routeset.Assemble(name, listener.GetValue(), in)
	if err != nil {
		return assembly{}, fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	return assembly{inputs: inputs, src: &anypb.Any{TypeUrl: listener.GetTypeUrl(), Value: b}}, nil
}

// assembly is a listener assembled from its route sets: the payloads it was made of, the
// listener's first, and the payload made.
type assembly struct {
	inputs []*anypb.Any
	src    *anypb.Any
}

func byName[T proto.Message](a, b entry[T]) int { return cmp.Compare(a.name, b.name) }

// known takes a resource prev compiled, unchanged, or a newer version of a listener prev
// compiled, without decoding it.
func (s *sorted) known(prev *Table, key string, src *anypb.Any) bool {
	switch {
	case strings.HasPrefix(key, ListenerKeyPrefix):
		name := key[len(ListenerKeyPrefix):]
		if old, ok := prev.listeners[name]; ok && (samePayload(old.src, src) || src.GetTypeUrl() == listenerTypeURL) {
			s.listeners = append(s.listeners, entry[*discoveryv1.Listener]{key: key, name: name, src: src})
			return true
		}
	case strings.HasPrefix(key, ClusterKeyPrefix):
		name := key[len(ClusterKeyPrefix):]
		if old, ok := prev.clusterNames[name]; ok && samePayload(old.src, src) {
			s.clusters = append(s.clusters, entry[*discoveryv1.Cluster]{key: key, name: name, src: src})
			return true
		}
	case strings.HasPrefix(key, CertificateKeyPrefix):
		name := key[len(CertificateKeyPrefix):]
		if old, ok := prev.certificates[name]; ok && samePayload(old.src, src) {
			s.certificates = append(s.certificates, entry[*discoveryv1.Certificate]{key: key, name: name, src: src})
			return true
		}
	}
	return false
}

// samePayload says whether two payloads decode to the same message: the controller encodes
// deterministically, and a delta merged by the agent shares the unchanged payloads.
func samePayload(a, b *anypb.Any) bool {
	return a == b || a.GetTypeUrl() == b.GetTypeUrl() && bytes.Equal(a.GetValue(), b.GetValue())
}

func (s *sorted) decode(key string, payload *anypb.Any) error {
	msg, err := payload.UnmarshalNew()
	if err != nil {
		return fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	switch m := msg.(type) {
	case *discoveryv1.Listener:
		s.listeners = append(s.listeners, entry[*discoveryv1.Listener]{key: key, name: m.GetName(), src: payload, msg: m})
		return checkKey(key, ListenerKeyPrefix, m.GetName())
	case *discoveryv1.Cluster:
		s.clusters = append(s.clusters, entry[*discoveryv1.Cluster]{key: key, name: m.GetName(), src: payload, msg: m})
		return checkKey(key, ClusterKeyPrefix, m.GetName())
	case *discoveryv1.Certificate:
		s.certificates = append(s.certificates, entry[*discoveryv1.Certificate]{key: key, name: m.GetName(), src: payload, msg: m})
		return checkKey(key, CertificateKeyPrefix, m.GetName())
	}
	return fmt.Errorf("%w: unknown payload type %s", ErrInvalid, proto.MessageName(msg))
}

func checkKey(key, prefix, name string) error {
	if name == "" || key != prefix+name {
		return fmt.Errorf("%w: key does not name its payload %q", ErrInvalid, name)
	}
	return nil
}

// clusters compiles the clusters that changed and gives each new one a slot: the lowest one
// free, so slots stay dense. A cluster that stays keeps its slot and its ClusterRef.
func (c *compiler) clusters(in []entry[*discoveryv1.Cluster]) []error {
	t, prev := c.table, c.prev
	t.clusters = slices.Clone(prev.clusters)
	present := make(map[string]bool, len(in))
	for _, e := range in {
		present[e.name] = true
	}
	for name, old := range prev.clusterNames {
		if !present[name] {
			t.clusters[old.Index] = nil
			c.moved[name] = true
		}
	}
	var free []int
	for i, cl := range t.clusters {
		if cl == nil {
			free = append(free, i)
		}
	}
	var errs []error
	for _, e := range in {
		old, had := prev.clusterNames[e.name]
		if e.msg == nil {
			t.clusterNames[e.name] = old
			continue
		}
		var ref *ClusterRef
		switch {
		case had:
			ref = old.ref
		case len(free) > 0:
			ref, free = newClusterRef(e.name, free[0]), free[1:]
			c.moved[e.name] = true
		default:
			ref = newClusterRef(e.name, len(t.clusters))
			t.clusters = append(t.clusters, nil)
			c.moved[e.name] = true
		}
		cl, err := compileCluster(e.msg, ref)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		cl.src = e.src
		t.clusters[ref.Index] = cl
		t.clusterNames[e.name] = cl
	}
	for len(t.clusters) > 0 && t.clusters[len(t.clusters)-1] == nil {
		t.clusters = t.clusters[:len(t.clusters)-1]
	}
	return errs
}

// certificateStage parses the certificates that changed.
func (c *compiler) certificateStage(in []entry[*discoveryv1.Certificate]) []error {
	var errs []error
	for _, e := range in {
		if e.msg == nil {
			c.table.certificates[e.name] = c.prev.certificates[e.name]
			continue
		}
		c.certsChanged[e.name] = true
		cert, err := compileCertificate(e.msg)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		cert.src = e.src
		c.table.certificates[e.name] = cert
	}
	for name := range c.prev.certificates {
		if _, ok := c.table.certificates[name]; !ok {
			c.certsChanged[name] = true
		}
	}
	return errs
}

func (c *compiler) listenerStage(in []entry[*discoveryv1.Listener]) []error {
	var errs []error
	for _, e := range in {
		l, err := c.listenerEntry(e)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		c.table.listeners[l.name] = l
	}
	return errs
}

// listenerEntry compiles one listener: whole when it is new, else refreshed (unchanged) or
// patched (changed) from its previous compilation; a patch that meets an encoding it does not
// expect leaves the listener to be decoded and compiled whole.
func (c *compiler) listenerEntry(e entry[*discoveryv1.Listener]) (*compiledListener, error) {
	if e.msg != nil {
		return c.listener(e.msg, e.src)
	}
	old := c.prev.listeners[e.name]
	if samePayload(old.src, e.src) {
		return c.refreshListener(old)
	}
	if l, ok, err := c.patchListener(old, e); ok {
		return l, err
	}
	msg, err := e.src.UnmarshalNew()
	if err != nil {
		return nil, fmt.Errorf("resource %q: %w: %w", e.key, ErrInvalid, err)
	}
	l, ok := msg.(*discoveryv1.Listener)
	if !ok {
		return nil, fmt.Errorf("resource %q: %w: unknown payload type %s", e.key, ErrInvalid, proto.MessageName(msg))
	}
	if err := checkKey(e.key, ListenerKeyPrefix, l.GetName()); err != nil {
		return nil, fmt.Errorf("resource %q: %w", e.key, err)
	}
	return c.listener(l, e.src)
}

// ports groups the listeners by port, in name order, reusing every port of prev whose
// listeners are all the same, and lists the skipped listeners.
func (c *compiler) ports() {
	t := c.table
	names := make([]string, 0, len(t.listeners))
	for name := range t.listeners {
		names = append(names, name)
	}
	slices.Sort(names)
	groups := map[uint32][]*compiledListener{}
	for _, name := range names {
		l := t.listeners[name]
		groups[l.port] = append(groups[l.port], l)
	}
	t.ports = make(map[uint32]*Port, len(groups))
	for n, members := range groups {
		if old, ok := c.prev.ports[n]; ok && slices.Equal(old.members, members) {
			t.ports[n] = old
			continue
		}
		t.ports[n] = buildPort(n, members)
	}
	for _, name := range names {
		if l := t.listeners[name]; t.ports[l.port].Protocol != l.proto {
			t.Skipped = append(t.Skipped, name)
		}
	}
}
