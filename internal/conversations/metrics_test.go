package conversations

import (
	"fmt"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"

	"github.com/poppyhost/poppyhost/internal/notify"
	"github.com/poppyhost/poppyhost/internal/safehttp"
)

// TestReadersGauge: the readers gauge counts the streams and long-polls
// registered now; stopping a waiter twice takes it off once.
func TestReadersGauge(t *testing.T) {
	m := NewMetrics(prometheus.NewRegistry())
	hub := NewHub(notify.New(nil, nil), HubMetrics(m))
	stream, poll, poll2 := hub.WatchDeltas(1, "cnv_a"), hub.Watch(1, "cnv_a"), hub.Watch(2, "cnv_b")
	require.Equal(t, 1.0, testutil.ToFloat64(m.readers[readerStream]))
	require.Equal(t, 2.0, testutil.ToFloat64(m.readers[readerLongPoll]))
	poll.Stop()
	poll.Stop()
	stream.Stop()
	require.Zero(t, testutil.ToFloat64(m.readers[readerStream]))
	require.Equal(t, 1.0, testutil.ToFloat64(m.readers[readerLongPoll]))
	poll2.Stop()
	require.Zero(t, testutil.ToFloat64(m.readers[readerLongPoll]))
}

// TestDeliveryResults: a webhook post is delivered, refused (an answer
// not 2xx, a redirect included) or failed (no answer).
func TestDeliveryResults(t *testing.T) {
	m := NewMetrics(nil)
	m.delivered(nil)
	m.delivered(fmt.Errorf("POST x: %w: 500", safehttp.ErrStatus))
	m.delivered(fmt.Errorf("POST x: %w: status 302", safehttp.ErrRedirect))
	m.delivered(fmt.Errorf("POST x: dial: connection refused"))
	require.Equal(t, 1.0, testutil.ToFloat64(m.deliveries[deliveryOK]))
	require.Equal(t, 2.0, testutil.ToFloat64(m.deliveries[deliveryRefused]))
	require.Equal(t, 1.0, testutil.ToFloat64(m.deliveries[deliveryFailed]))
}
