package origin

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// TestBufferPool: every buffer lent is a whole 32 KiB, whatever was given
// back, and buffers of another size are not kept.
func TestBufferPool(t *testing.T) {
	t.Parallel()
	var p bufferPool
	b := p.Get()
	require.Len(t, b, 32<<10)
	p.Put(b[:10])
	require.Len(t, p.Get(), 32<<10)
	p.Put(make([]byte, 100))
	for range 3 {
		require.Len(t, p.Get(), 32<<10)
	}
}
