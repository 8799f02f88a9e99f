package service

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"sync"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/ptr"
)

// Config says which addresses the controller serves.
type Config struct {
	// ServiceCIDR is the API server's service range: ClusterIPs outside it are not served.
	ServiceCIDR netip.Prefix
	// LBPool is the range load-balancer addresses come from.
	LBPool netip.Prefix
	// LBClass is the spec.loadBalancerClass served besides none; empty serves only Services
	// without a class.
	LBClass string
	// IdleTimeout closes a connection on which nothing moved either way for that long.
	IdleTimeout time.Duration
	// DialTimeout bounds the connection to a backend.
	DialTimeout time.Duration
}

// Controller keeps the proxy's frontends and the load-balancer addresses in step with the
// Services and EndpointSlices of the cluster.
type Controller struct {
	client kubernetes.Interface
	cfg    Config
	log    logr.Logger
	pool   *Pool
	proxy  *Proxy

	services  corelisters.ServiceLister
	endpoints cache.Indexer
	queue     workqueue.TypedRateLimitingInterface[string]

	mu      sync.Mutex
	warned  map[string]bool   // Service ports already reported as not served
	refused map[string]string // why a Service's requested address was last refused
}

// eventComponent is the source of the events the agent records.
const eventComponent = "coxswain-nodeagent"

const byService = "service"

// Validate checks the ranges: IPv4, apart from each other, and a pool with room.
func (cfg Config) Validate() error {
	if !cfg.ServiceCIDR.Addr().Is4() {
		return fmt.Errorf("service range %s: not an IPv4 range", cfg.ServiceCIDR)
	}
	if _, err := NewPool(cfg.LBPool); err != nil {
		return err
	}
	if cfg.ServiceCIDR.Overlaps(cfg.LBPool) {
		return fmt.Errorf("load-balancer pool %s overlaps the service range %s", cfg.LBPool, cfg.ServiceCIDR)
	}
	return nil
}

// New returns a Controller; Run starts it.
func New(client kubernetes.Interface, cfg Config, log logr.Logger) (*Controller, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	pool, err := NewPool(cfg.LBPool)
	if err != nil {
		return nil, err
	}
	if cfg.IdleTimeout == 0 {
		cfg.IdleTimeout = time.Hour
	}
	if cfg.DialTimeout == 0 {
		cfg.DialTimeout = 3 * time.Second
	}
	log = log.WithName("services")
	return &Controller{
		client: client, cfg: cfg, log: log, pool: pool,
		proxy:  NewProxy(log.WithName("proxy"), cfg.IdleTimeout, cfg.DialTimeout),
		warned: map[string]bool{}, refused: map[string]string{},
	}, nil
}

// Run watches Services and EndpointSlices until ctx ends, then closes every listener and
// connection of the proxy.
func (c *Controller) Run(ctx context.Context) error {
	defer c.proxy.Close()
	c.queue = workqueue.NewTypedRateLimitingQueueWithConfig(
		workqueue.NewTypedItemExponentialFailureRateLimiter[string](100*time.Millisecond, 30*time.Second),
		workqueue.TypedRateLimitingQueueConfig[string]{Name: "services"})
	defer c.queue.ShutDown()
	factory, err := c.watch()
	if err != nil {
		return err
	}
	factory.Start(ctx.Done())
	defer factory.Shutdown()
	for typ, ok := range factory.WaitForCacheSync(ctx.Done()) {
		if !ok && ctx.Err() == nil {
			return fmt.Errorf("sync the %v cache", typ)
		}
	}
	if ctx.Err() != nil {
		return nil
	}
	if err := c.restore(); err != nil {
		return err
	}
	var wg sync.WaitGroup
	for range 2 {
		wg.Go(func() {
			for c.next(ctx) {
			}
		})
	}
	<-ctx.Done()
	c.queue.ShutDown()
	wg.Wait()
	return nil
}

// watch sets up the informers: a change of a Service, or of one of its EndpointSlices, queues
// the Service's key.
func (c *Controller) watch() (informers.SharedInformerFactory, error) {
	factory := informers.NewSharedInformerFactory(c.client, 0)
	svcInformer := factory.Core().V1().Services()
	sliceInformer := factory.Discovery().V1().EndpointSlices().Informer()
	if err := sliceInformer.AddIndexers(cache.Indexers{byService: sliceService}); err != nil {
		return nil, fmt.Errorf("index EndpointSlices: %w", err)
	}
	c.services = svcInformer.Lister()
	c.endpoints = sliceInformer.GetIndexer()
	if _, err := svcInformer.Informer().AddEventHandler(c.handler(serviceKeys)); err != nil {
		return nil, fmt.Errorf("watch Services: %w", err)
	}
	if _, err := sliceInformer.AddEventHandler(c.handler(func(obj any) []string {
		keys, _ := sliceService(obj) // it fails on nothing
		return keys
	})); err != nil {
		return nil, fmt.Errorf("watch EndpointSlices: %w", err)
	}
	return factory, nil
}

// handler queues the Service keys of every object added, updated or deleted.
func (c *Controller) handler(keys func(any) []string) cache.ResourceEventHandlerFuncs {
	add := func(obj any) {
		for _, k := range keys(obj) {
			c.queue.Add(k)
		}
	}
	return cache.ResourceEventHandlerFuncs{AddFunc: add, UpdateFunc: func(_, obj any) { add(obj) }, DeleteFunc: add}
}

// restore claims the load-balancer addresses the served Services hold in their status, the
// older Service winning a clash, before any Service is given a new one.
func (c *Controller) restore() error {
	svcs, err := c.services.List(labels.Everything())
	if err != nil {
		return fmt.Errorf("list Services: %w", err)
	}
	var hs []Holding
	for _, svc := range svcs {
		if !c.servesLB(svc) {
			continue
		}
		if a, ok := statusAddr(svc); ok {
			hs = append(hs, Holding{Key: key(svc), Created: svc.CreationTimestamp.Time, Addr: a})
		}
	}
	for _, k := range c.pool.Restore(hs) {
		c.log.Info("Load-balancer address taken by an older Service or outside the pool, allocating another", "service", k)
	}
	return nil
}

func (c *Controller) next(ctx context.Context) bool {
	k, shutdown := c.queue.Get()
	if shutdown {
		return false
	}
	defer c.queue.Done(k)
	if err := c.sync(ctx, k); err != nil {
		// A conflict only means the cache had not seen the last write yet (often our own).
		if apierrors.IsConflict(err) {
			c.log.V(1).Info("Sync conflicted, retrying", "service", k, "reason", err.Error())
		} else {
			c.log.Error(err, "Sync failed, retrying", "service", k)
		}
		c.queue.AddRateLimited(k)
		return true
	}
	c.queue.Forget(k)
	return true
}

// sync brings the address and frontends of one Service in line with the cluster.
func (c *Controller) sync(ctx context.Context, k string) error {
	ns, name, err := cache.SplitMetaNamespaceKey(k)
	if err != nil {
		return nil //nolint:nilerr // a malformed key cannot become valid by retrying
	}
	svc, err := c.services.Services(ns).Get(name)
	if apierrors.IsNotFound(err) {
		c.pool.Release(k)
		c.forgetRefusal(k)
		c.retryRefused()
		return c.proxy.Set(k, nil)
	}
	if err != nil {
		return err
	}
	var lbIP netip.Addr
	var errs []error
	if c.servesLB(svc) {
		if lbIP, err = c.ensureAddress(ctx, k, svc); err != nil {
			errs = append(errs, err)
		}
	} else {
		c.pool.Release(k)
		c.retryRefused()
		errs = append(errs, c.clearAddress(ctx, svc))
	}
	objs, err := c.endpoints.ByIndex(byService, k)
	if err != nil {
		return err
	}
	eps := make([]*discoveryv1.EndpointSlice, 0, len(objs))
	for _, o := range objs {
		eps = append(eps, o.(*discoveryv1.EndpointSlice))
	}
	fs, unserved := Frontends(svc, c.cfg.ServiceCIDR, lbIP, eps)
	c.warnUnserved(k, unserved)
	errs = append(errs, c.proxy.Set(k, fs))
	return errors.Join(errs...)
}

// servesLB says whether svc is a LoadBalancer Service of a class the agent serves.
func (c *Controller) servesLB(svc *corev1.Service) bool {
	if svc.Spec.Type != corev1.ServiceTypeLoadBalancer {
		return false
	}
	class := ptr.Deref(svc.Spec.LoadBalancerClass, "")
	return class == "" || class == c.cfg.LBClass
}

// ensureAddress gives svc its load-balancer address and writes it to the status: the one its
// spec.loadBalancerIP requests when that is an address of the pool nobody else holds (else none,
// and the Service is told why), otherwise the one its status holds when free, else a new one.
func (c *Controller) ensureAddress(ctx context.Context, k string, svc *corev1.Service) (netip.Addr, error) {
	if svc.Spec.LoadBalancerIP != "" {
		return c.ensureRequested(ctx, k, svc)
	}
	a, ok := c.pool.Lookup(k)
	if !ok {
		held, has := statusAddr(svc)
		if !has || !c.pool.Claim(k, held) {
			var err error
			if a, err = c.pool.Allocate(k); err != nil {
				return netip.Addr{}, err
			}
			c.log.Info("Allocated load-balancer address", "service", k, "address", a.String())
		} else {
			a = held
		}
	}
	return a, c.writeAddress(ctx, svc, a)
}

// ensureRequested gives svc the address its spec.loadBalancerIP requests, if it can be had:
// otherwise svc gives up any address it held, its status is left without one, and a warning
// event on it says why (once per reason, until the request changes or succeeds).
func (c *Controller) ensureRequested(ctx context.Context, k string, svc *corev1.Service) (netip.Addr, error) {
	req := svc.Spec.LoadBalancerIP
	want, err := netip.ParseAddr(req)
	var why string
	switch {
	case err != nil || !want.Is4():
		why = fmt.Sprintf("spec.loadBalancerIP %q is not an IPv4 address", req)
	case !c.pool.Claim(k, want):
		why = c.pool.Refusal(k, want)
	}
	if why == "" {
		c.forgetRefusal(k)
		return want, c.writeAddress(ctx, svc, want)
	}
	c.pool.Release(k)
	c.refuse(ctx, k, svc, why)
	return netip.Addr{}, c.writeAddress(ctx, svc, netip.Addr{})
}

// refuse logs and records, as a warning event on svc, why its requested address is not
// assigned; once per Service and reason.
func (c *Controller) refuse(ctx context.Context, k string, svc *corev1.Service, why string) {
	c.mu.Lock()
	seen := c.refused[k] == why
	c.refused[k] = why
	c.mu.Unlock()
	if seen {
		return
	}
	c.log.Info("Requested load-balancer address not assigned", "service", k, "reason", why)
	now := metav1.NewTime(time.Now())
	ev := &corev1.Event{
		// Named as client-go's recorder names events.
		ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("%s.%x", svc.Name, now.UnixNano()), Namespace: svc.Namespace},
		InvolvedObject: corev1.ObjectReference{
			Kind: "Service", APIVersion: "v1", Namespace: svc.Namespace, Name: svc.Name,
			UID: svc.UID, ResourceVersion: svc.ResourceVersion,
		},
		Reason:         "AddressNotAssigned",
		Message:        "The requested load-balancer address is not assigned: " + why,
		Type:           corev1.EventTypeWarning,
		Source:         corev1.EventSource{Component: eventComponent},
		FirstTimestamp: now,
		LastTimestamp:  now,
		Count:          1,
	}
	if _, err := c.client.CoreV1().Events(svc.Namespace).Create(ctx, ev, metav1.CreateOptions{}); err != nil {
		c.log.Error(err, "Record event", "service", k)
	}
}

// retryRefused queues again the Services whose requested address was refused: an address may
// just have been freed.
func (c *Controller) retryRefused() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.queue == nil {
		return
	}
	for k := range c.refused {
		c.queue.Add(k)
	}
}

func (c *Controller) forgetRefusal(k string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.refused, k)
}

// writeAddress makes a the only ingress address of svc's status; none when a is invalid.
func (c *Controller) writeAddress(ctx context.Context, svc *corev1.Service, a netip.Addr) error {
	var want []corev1.LoadBalancerIngress
	if a.IsValid() {
		want = []corev1.LoadBalancerIngress{{IP: a.String(), IPMode: ptr.To(corev1.LoadBalancerIPModeVIP)}}
	}
	if equalIngress(svc.Status.LoadBalancer.Ingress, want) {
		return nil
	}
	update := svc.DeepCopy()
	update.Status.LoadBalancer.Ingress = want
	if _, err := c.client.CoreV1().Services(svc.Namespace).UpdateStatus(ctx, update, metav1.UpdateOptions{}); err != nil {
		return fmt.Errorf("write load-balancer address %s to %s: %w", a, key(svc), err)
	}
	return nil
}

// clearAddress removes a pool address from the status of a Service the agent no longer
// serves as a load balancer because it stopped being one. A Service of another class is
// left to its controller.
func (c *Controller) clearAddress(ctx context.Context, svc *corev1.Service) error {
	if svc.Spec.Type == corev1.ServiceTypeLoadBalancer {
		return nil
	}
	if a, ok := statusAddr(svc); !ok || !c.pool.Prefix().Contains(a) {
		return nil
	}
	update := svc.DeepCopy()
	update.Status.LoadBalancer = corev1.LoadBalancerStatus{}
	if _, err := c.client.CoreV1().Services(svc.Namespace).UpdateStatus(ctx, update, metav1.UpdateOptions{}); err != nil {
		return fmt.Errorf("clear load-balancer address of %s: %w", key(svc), err)
	}
	return nil
}

func (c *Controller) warnUnserved(k string, ports []corev1.ServicePort) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, p := range ports {
		id := fmt.Sprintf("%s/%s/%d", k, p.Protocol, p.Port)
		if !c.warned[id] {
			c.warned[id] = true
			c.log.Info("Service port not served: only TCP and UDP are proxied", "service", k, "port", p.Port, "protocol", p.Protocol)
		}
	}
}

// statusAddr is the first IPv4 ingress address of svc's status.
func statusAddr(svc *corev1.Service) (netip.Addr, bool) {
	for _, in := range svc.Status.LoadBalancer.Ingress {
		if a, err := netip.ParseAddr(in.IP); err == nil && a.Is4() {
			return a, true
		}
	}
	return netip.Addr{}, false
}

func equalIngress(a, b []corev1.LoadBalancerIngress) bool {
	return slices.EqualFunc(a, b, func(x, y corev1.LoadBalancerIngress) bool {
		return x.IP == y.IP && x.Hostname == y.Hostname && ptr.Equal(x.IPMode, y.IPMode) && len(x.Ports) == 0 && len(y.Ports) == 0
	})
}

func key(svc *corev1.Service) string { return svc.Namespace + "/" + svc.Name }

func serviceKeys(obj any) []string {
	k, err := cache.DeletionHandlingMetaNamespaceKeyFunc(obj)
	if err != nil {
		return nil
	}
	return []string{k}
}

// sliceService indexes an EndpointSlice by the key of the Service it belongs to.
func sliceService(obj any) ([]string, error) {
	if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = d.Obj
	}
	s, ok := obj.(*discoveryv1.EndpointSlice)
	if !ok {
		return nil, nil
	}
	name := s.Labels[discoveryv1.LabelServiceName]
	if name == "" {
		return nil, nil
	}
	return []string{s.Namespace + "/" + name}, nil
}
