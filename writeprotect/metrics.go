package writeprotect

import (
	"context"
	"errors"
	"fmt"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/stacksaga-go/stacksaga/telemetry"
)

// RegisterMetrics reports the guard's counters through mp, read from Stats
// when collected (nothing is added to Execute): executions, duplicates
// skipped, lease waits, leases held past the wait, null compensations,
// retryable outcomes recorded, recorded outcomes superseded and lost
// leases (telemetry.MetricGuard*), each with attrs. A worker made with
// worker.WithMeterProvider calls it with its service as attribute; call it
// yourself for a guard used otherwise. Unregister the result to stop.
func (g *Guard) RegisterMetrics(mp metric.MeterProvider, attrs ...attribute.KeyValue) (metric.Registration, error) {
	if mp == nil {
		return nil, errors.New("writeprotect: RegisterMetrics: nil MeterProvider")
	}
	m := mp.Meter(telemetry.ScopeName + "/writeprotect")
	var errs []error
	counter := func(name, unit, desc string) metric.Int64ObservableCounter {
		c, err := m.Int64ObservableCounter(name, metric.WithUnit(unit), metric.WithDescription(desc))
		errs = append(errs, err)
		return c
	}
	executions := counter(telemetry.MetricGuardExecutions, "{command}", "Commands whose business handler the guard let run.")
	duplicates := counter(telemetry.MetricGuardDuplicatesSkipped, "{command}", "Duplicate deliveries the guard did not run (recorded reply re-sent, or compensation already done).")
	waits := counter(telemetry.MetricGuardLeaseWaits, "{wait}", "Waits for another execution's live lease.")
	held := counter(telemetry.MetricGuardLeaseHeld, "{command}", "Commands put back because a lease outlived the wait.")
	nulls := counter(telemetry.MetricGuardNullCompensations, "{command}", "Compensations recorded empty because their action never ran.")
	retryables := counter(telemetry.MetricGuardRetryablesRecorded, "{command}", "Retryable outcomes recorded: duplicates of the failed attempt re-send them.")
	superseded := counter(telemetry.MetricGuardSuperseded, "{command}", "Recorded outcomes of an attempt that a later attempt of the step replaced.")
	lost := counter(telemetry.MetricGuardLostLeases, "{command}", "STRICT executions whose conditional commit found their lease taken over.")
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("writeprotect: metrics: %w", err)
	}
	on := metric.WithAttributeSet(attribute.NewSet(attrs...))
	reg, err := m.RegisterCallback(func(_ context.Context, ob metric.Observer) error {
		st := g.Stats()
		ob.ObserveInt64(executions, int64(st.Executions), on)
		ob.ObserveInt64(duplicates, int64(st.DuplicatesSkipped), on)
		ob.ObserveInt64(waits, int64(st.LeaseWaits), on)
		ob.ObserveInt64(held, int64(st.LeaseHeld), on)
		ob.ObserveInt64(nulls, int64(st.NullCompensations), on)
		ob.ObserveInt64(retryables, int64(st.RetryablesRecorded), on)
		ob.ObserveInt64(superseded, int64(st.Superseded), on)
		ob.ObserveInt64(lost, int64(st.LostLeases), on)
		return nil
	}, executions, duplicates, waits, held, nulls, retryables, superseded, lost)
	if err != nil {
		return nil, fmt.Errorf("writeprotect: metrics: %w", err)
	}
	return reg, nil
}
