package crosstenant_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/poppyhost/poppyhost/internal/feedback"
)

func TestFeedback(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	store := feedback.NewStore(w.pool)
	w.feedback(t, w.a.ID, "return an order")

	t.Run("feedback.Store/List", func(t *testing.T) {
		got, err := store.List(w.ctx, w.b.ID, 0, 100)
		require.NoError(t, err)
		require.Empty(t, got)
		got, err = store.List(w.ctx, w.a.ID, 0, 100)
		require.NoError(t, err)
		require.Len(t, got, 1)
		require.Equal(t, "return an order", got[0].Task)
		// Paging from A's report as B finds nothing either.
		got, err = store.List(w.ctx, w.b.ID, got[0].ID+1, 100)
		require.NoError(t, err)
		require.Empty(t, got)
	})
}
