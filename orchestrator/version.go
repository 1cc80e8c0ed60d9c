package orchestrator

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/stacksaga-go/stacksaga/eventstore"
	"github.com/stacksaga-go/stacksaga/recovery"
)

// Versioned saga definitions (issue 40.3). A domain registers one or more
// versions of its definition (Domain.Versions); a saga records the version
// it was started with (eventstore.Transaction.Definition) and is driven by
// that version's OnNext and OnNextRevert until it ends, whatever version
// new sagas start with. See docs/versions.md.

// Definition is one version of a domain's definition: the event manager
// (OnNext, OnNextRevert) that drives the sagas started with it.
type Definition[T any] struct {
	// Version numbers the definition: 1 or more, unique in the domain.
	// Sagas written before definitions had versions are version 1.
	Version int
	// OnNext and OnNextRevert are as in Domain (OnNextRevert nil: the
	// default, ReverseCompensation).
	OnNext       func(ctx context.Context, s *Saga[T]) Decision
	OnNextRevert func(ctx context.Context, s *Saga[T]) Decision
	// DecodeEntity, if set, decodes the stored entity of this version's
	// sagas (the payload the workers last returned) into T for OnNext,
	// OnNextRevert, Get and listeners: the entity type's migration, for a
	// version whose entity was encoded with another layout than T's
	// (a field renamed or retyped). Nil decodes with msgpack, as the
	// orchestrator encodes T. It does not change what is stored or what
	// the workers receive: they get the payload as it is.
	DecodeEntity func(payload []byte, into *T) error
}

// Sentinel errors of versioned definitions.
var (
	// ErrVersionInFlight means a version of the domain's definition that
	// sagas still in flight were started with is not registered: the
	// orchestrator could not drive them. Run fails with it (a
	// *VersionInFlightError) before consuming anything.
	ErrVersionInFlight = errors.New("orchestrator: sagas in flight use a definition version that is not registered")
	// ErrUnknownVersion means a saga's definition version is not
	// registered in this orchestrator (a saga started by a newer instance
	// during a rolling deploy, or a version removed while sagas ran).
	ErrUnknownVersion = errors.New("orchestrator: definition version not registered")
)

// VersionInFlightError names the unregistered definition versions that
// sagas in flight use, with their counts. It matches ErrVersionInFlight.
type VersionInFlightError struct {
	Domain string
	// InFlight maps each unregistered version to the number of sagas in
	// flight (not terminal) started with it.
	InFlight map[int]int
}

func (e *VersionInFlightError) Error() string {
	vs := make([]int, 0, len(e.InFlight))
	for v := range e.InFlight {
		vs = append(vs, v)
	}
	slices.Sort(vs)
	parts := make([]string, len(vs))
	for i, v := range vs {
		parts[i] = fmt.Sprintf("version %d has %d saga(s) in flight", v, e.InFlight[v])
	}
	return fmt.Sprintf("orchestrator: domain %s: %s but is not registered (register it again until they end)", e.Domain, strings.Join(parts, ", "))
}

// Is matches ErrVersionInFlight.
func (e *VersionInFlightError) Is(target error) bool { return target == ErrVersionInFlight }

// definitions are a domain's registered versions, newest last.
type definitions[T any] struct {
	byVersion map[int]*Definition[T]
	oldest    int
	newest    int
}

// newDefinitions checks and indexes d's definitions: Versions, or the
// single OnNext/OnNextRevert as version 1.
func newDefinitions[T any](d Domain[T]) (definitions[T], []error) {
	var errs []error
	defs := definitions[T]{byVersion: map[int]*Definition[T]{}}
	list := d.Versions
	switch {
	case len(list) == 0 && d.OnNext == nil:
		return defs, []error{errors.New("orchestrator: domain OnNext is nil")}
	case len(list) == 0:
		list = []Definition[T]{{Version: 1, OnNext: d.OnNext, OnNextRevert: d.OnNextRevert}}
	case d.OnNext != nil || d.OnNextRevert != nil:
		errs = append(errs, errors.New("orchestrator: domain has both OnNext/OnNextRevert and Versions: put the definition in Versions"))
	}
	for i := range list {
		def := list[i]
		switch {
		case def.Version < 1 || def.Version > eventstore.MaxDefinition:
			errs = append(errs, fmt.Errorf("orchestrator: definition version %d: want 1..%d", def.Version, eventstore.MaxDefinition))
			continue
		case defs.byVersion[def.Version] != nil:
			errs = append(errs, fmt.Errorf("orchestrator: definition version %d registered twice", def.Version))
			continue
		case def.OnNext == nil:
			errs = append(errs, fmt.Errorf("orchestrator: definition version %d: OnNext is nil", def.Version))
			continue
		}
		if def.OnNextRevert == nil {
			def.OnNextRevert = ReverseCompensation[T]
		}
		defs.byVersion[def.Version] = &def
		if defs.oldest == 0 || def.Version < defs.oldest {
			defs.oldest = def.Version
		}
		defs.newest = max(defs.newest, def.Version)
	}
	return defs, errs
}

// versionOf is the definition version of tx: its Definition, 1 for a row
// written before versions (0).
func versionOf(tx *eventstore.Transaction) int {
	if tx.Definition <= 0 {
		return 1
	}
	return tx.Definition
}

// definition returns the definition that drives tx; ok is false when its
// version is not registered.
func (o *Orchestrator[T]) definition(tx *eventstore.Transaction) (def *Definition[T], ok bool) {
	def, ok = o.defs.byVersion[versionOf(tx)]
	if !ok {
		return &Definition[T]{Version: versionOf(tx), OnNext: unknownVersion[T], OnNextRevert: unknownVersion[T]}, false
	}
	return def, true
}

// onNext and onNextRevert are the decision functions of tx's version.
func (o *Orchestrator[T]) onNext(tx *eventstore.Transaction) func(context.Context, *Saga[T]) Decision {
	d, _ := o.definition(tx)
	return d.OnNext
}

func (o *Orchestrator[T]) onNextRevert(tx *eventstore.Transaction) func(context.Context, *Saga[T]) Decision {
	d, _ := o.definition(tx)
	return d.OnNextRevert
}

// unknownVersion is the decision function of a version that is not
// registered. The entry points check the version first (unregistered), so
// it decides only if a saga's version changed under them; it fails the
// step rather than drive the saga by another version's steps.
func unknownVersion[T any](_ context.Context, s *Saga[T]) Decision {
	return Fail(fmt.Sprintf("definition version %d is not registered", s.Version))
}

// unregistered reports whether tx's definition version is not registered
// here, counting it (Stats.UnknownVersion) and logging it: the caller then
// leaves the saga as it is, for an instance that has the version (the
// saga's restore watchdog re-sends its step; Redrive continues a parked
// one).
func (o *Orchestrator[T]) unregistered(ctx context.Context, tx *eventstore.Transaction, what string) bool {
	if _, ok := o.defs.byVersion[versionOf(tx)]; ok {
		return false
	}
	o.stats.unknownVersion.Add(1)
	o.logger().WarnContext(ctx, "orchestrator: saga of a definition version not registered here: "+what+" left for an instance that has it",
		"tx", tx.TxID, "version", versionOf(tx), "registered", o.Versions())
	return true
}

// Versions returns the registered definition versions, ascending.
func (o *Orchestrator[T]) Versions() []int {
	return keysOf(o.defs.byVersion)
}

// StartVersion returns the definition version new sagas start with: the
// newest registered, or the one WithStartVersion chose.
func (o *Orchestrator[T]) StartVersion() int { return o.startVersion }

// keysOf returns the versions of m, ascending.
func keysOf[T any](m map[int]*Definition[T]) []int {
	vs := make([]int, 0, len(m))
	for v := range m {
		vs = append(vs, v)
	}
	slices.Sort(vs)
	return vs
}

// InFlight counts the domain's sagas in flight (not terminal) by the
// definition version they were started with (sagas written before versions
// count as version 1), as recovery.InFlightByDefinition finds them: by the
// restore watchdogs of the recovery directory and the DISABLED sagas of
// the frozen table, one read per saga in flight.
func (o *Orchestrator[T]) InFlight(ctx context.Context) (map[int]int, error) {
	n, err := recovery.InFlightByDefinition(ctx, o.store, o.scope, o.cfg.recovery, o.cfg.now(), o.domain.Name)
	if err != nil {
		return nil, fmt.Errorf("orchestrator: count sagas in flight by version: %w", err)
	}
	out := make(map[int]int, len(n))
	for v, c := range n {
		out[max(v, 1)] += c
	}
	return out, nil
}

// checkVersions is Run's guard against removing a version by mistake: it
// fails with a *VersionInFlightError when sagas in flight use a version
// that is not registered.
func (o *Orchestrator[T]) checkVersions(ctx context.Context) error {
	n, err := o.InFlight(ctx)
	if err != nil {
		return err
	}
	missing := map[int]int{}
	for v, c := range n {
		if o.defs.byVersion[v] == nil && c > 0 {
			missing[v] = c
		}
	}
	if len(missing) > 0 {
		return &VersionInFlightError{Domain: o.domain.Name, InFlight: missing}
	}
	return nil
}
