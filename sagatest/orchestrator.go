package sagatest

import (
	"context"
	"time"

	"github.com/stacksaga-go/stacksaga/orchestrator"
	"github.com/stacksaga-go/stacksaga/topics"
)

// stagingSuffix names the topic workers reply to when a reply relay runs.
const stagingSuffix = ".sagatest-staging"

// Orchestrator starts an orchestrator of domain d, embedded in service,
// on e: orchestrator.New(service, d, opts...) with the env's brokers and
// store, run until the test ends. The harness sets the brokers and the
// consumer group; the store, logger and topic partitions unless opts set
// them. It returns once the orchestrator consumes its callback topic, and
// fails the test if it cannot start.
func Orchestrator[T any](e *Env, service string, d orchestrator.Domain[T], opts ...orchestrator.Option) *orchestrator.Orchestrator[T] {
	e.t.Helper()
	if err := topics.ValidName(d.Name); err != nil {
		e.t.Fatalf("sagatest: domain: %v", err)
		return nil
	}
	callback := topics.CallbackTopic(d.Name)
	names := topics.OrchestratorTopics(d.Name)
	relayed := e.cfg.replyCopies > 0 || e.cfg.reorder
	if relayed {
		names = append(names, callback+stagingSuffix)
	}
	if err := e.ensureTopics(names...); err != nil {
		e.t.Fatalf("sagatest: orchestrator %s: %v", service, err)
		return nil
	}
	if relayed {
		if err := e.startRelay(callback+stagingSuffix, callback, e.cfg.replyCopies, e.cfg.reorder, &e.stats.replyCopies); err != nil {
			e.t.Fatalf("sagatest: orchestrator %s: %v", service, err)
			return nil
		}
		e.mu.Lock()
		e.staging[callback] = callback + stagingSuffix
		e.mu.Unlock()
	}
	group := topics.Prefix + "." + service + "." + d.Name + ".orchestrator"
	all := []orchestrator.Option{
		orchestrator.WithStore(e.store),
		orchestrator.WithLogger(e.log),
		orchestrator.WithProvision(e.provision()),
	}
	if e.cfg.groupType == topics.GroupShare {
		all = append(all, orchestrator.WithGroupType(topics.GroupShare), orchestrator.WithShareSettings(e.cfg.share))
	}
	all = append(all, opts...)
	all = append(all, orchestrator.WithBrokers(e.brokers...), orchestrator.WithGroup(group))
	o, err := orchestrator.New(service, d, all...)
	if err != nil {
		e.t.Fatalf("sagatest: %v", err)
		return nil
	}
	e.mu.Lock()
	_, dup := e.orchs[group]
	e.orchs[group] = orchRef{group: group, topic: callback, scope: o.Scope(), domain: d.Name, store: o.Store(), share: o.GroupType() == topics.GroupShare}
	e.mu.Unlock()
	if dup {
		_ = o.Close()
		e.t.Fatalf("sagatest: orchestrator of %s in %s started twice", d.Name, service)
		return nil
	}
	ctx, cancel := context.WithCancel(e.ctx)
	done := make(chan error, 1)
	go func() { done <- o.Run(ctx) }()
	e.onStop(func() {
		cancel()
		if err := <-done; err != nil {
			e.t.Errorf("sagatest: orchestrator %s/%s: %v", service, d.Name, err)
		}
	})
	timer := time.NewTimer(e.cfg.timeout)
	defer timer.Stop()
	select {
	case <-o.Running():
	case err := <-done:
		done <- err // for the cleanup
		e.t.Fatalf("sagatest: orchestrator %s/%s: Run: %v", service, d.Name, err)
	case <-timer.C:
		e.t.Fatalf("sagatest: orchestrator %s/%s did not start within %v", service, d.Name, e.cfg.timeout)
	}
	return o
}

// stagingFor returns the staging topic of callback, or "" if its replies
// are not relayed.
func (e *Env) stagingFor(callback string) string {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.staging[callback]
}
