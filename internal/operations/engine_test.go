package operations_test

import (
	"context"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/poppyhost/poppyhost/internal/operations"
)

// TestHookAnswersWhileAnotherRetrySends: two retries of one approval; the
// approval hook lets the first claim the operation, and declines or fails
// for the second while the first's send is at the origin. The second is
// answered as the operation stands, being performed: never declined (the
// decline loses to the claim, DeclineUnclaimed), never an error that says
// nothing was performed (extension 7). The failing hook was found by
// TestEngineSchedules.
func TestHookAnswersWhileAnotherRetrySends(t *testing.T) {
	t.Parallel()
	w := newWorld(t, 0)
	for _, kind := range []hookKind{hDecline, hError, hReset} {
		t.Run(hookNames[kind], func(t *testing.T) {
			ctx := context.Background()
			s, err := w.start(1)
			require.NoError(t, err)
			s.hook = true
			s.co.Settings.Operations.ApprovalHook = hookURL
			s.stepPropose(ctx, harnessActions[0])
			h := s.helds[len(s.helds)-1]

			a, actA := s.performCall(h, s.ownerSession(), true)
			b, actB := s.performCall(h, s.ownerSession(), true)
			a.hook = hookPlan{kind: h204, wait: []<-chan struct{}{b.hookEntered, b.returned}}
			b.hook = hookPlan{kind: kind, wait: []<-chan struct{}{a.entered, a.returned}}
			a.origin = originPlan{kind: oOK, status: 201, wait: b.returned}
			var wg sync.WaitGroup
			wg.Go(func() { s.perform(ctx, s.eng, a, actA) })
			wg.Go(func() { s.perform(ctx, s.eng, b, actB) })
			wg.Wait()

			require.NoError(t, b.err)
			require.Equal(t, operations.OutcomePerforming, b.out.Kind)
			require.NoError(t, a.err)
			require.Equal(t, operations.OutcomePerformed, a.out.Kind)
			s.checkOutcomes()
			require.Empty(t, s.report())
		})
	}
}
