package symbolizeprocessor

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"time"

	"connectrpc.com/connect"
	"connectrpc.com/otelconnect"
	"go.opentelemetry.io/collector/component"
	"go.opentelemetry.io/collector/consumer/consumererror"
	"go.opentelemetry.io/collector/consumer/xconsumer"
	"go.opentelemetry.io/collector/pdata/pprofile"
	"go.opentelemetry.io/collector/processor/processorhelper"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
	"go.uber.org/zap"
	"go.uber.org/zap/exp/zapslog"

	"github.com/profsym/profsym/gen/profsym/symbolizer/v1/symbolizerv1connect"
	"github.com/profsym/profsym/pkg/affinity"
	"github.com/profsym/profsym/pkg/otlpprofiles"
	"github.com/profsym/profsym/pkg/otlpprofiles/symbolize"
)

type symbolizeProcessor struct {
	cfg    *Config
	next   xconsumer.Profiles
	hold   *symbolize.Holder
	logger *zap.Logger
	tel    *telemetry
	sym    *symbolize.Symbolizer
	hc     *http.Client
	router *affinity.Router
	// tp is the Collector's TracerProvider (service::telemetry::traces): the processor's spans
	// and its Symbolize client spans, whose W3C trace context the symbolizer continues.
	tp     trace.TracerProvider
	tracer trace.Tracer
}

func newProcessor(cfg *Config, set component.TelemetrySettings, next xconsumer.Profiles) (*symbolizeProcessor, error) {
	tp := set.TracerProvider
	if tp == nil {
		tp = noop.NewTracerProvider()
	}
	p := &symbolizeProcessor{cfg: cfg, next: next, logger: set.Logger, tp: tp,
		tracer: tp.Tracer("github.com/profsym/profsym/processor/symbolizeprocessor")}
	tel, err := newTelemetry(set, p.held)
	if err != nil {
		return nil, fmt.Errorf("symbolize processor telemetry: %w", err)
	}
	p.tel = tel
	return p, nil
}

// held returns the bytes of profiles held (0 before start and without a hold).
func (p *symbolizeProcessor) held() int64 {
	if h := p.hold; h != nil {
		_, b := h.Held()
		return b
	}
	return 0
}

// start builds the symbolizer client: TLS files and the token file are read here, so a
// rotated certificate or token takes effect with the Collector's next start.
func (p *symbolizeProcessor) start(ctx context.Context, _ component.Host) error {
	tr := &http.Transport{
		Proxy:               http.ProxyFromEnvironment,
		MaxIdleConns:        64,
		MaxIdleConnsPerHost: 64,
		IdleConnTimeout:     90 * time.Second,
		ForceAttemptHTTP2:   true,
	}
	if strings.HasPrefix(p.cfg.Endpoint, "https://") {
		tlsCfg, err := p.cfg.TLS.LoadTLSConfig(ctx)
		if err != nil {
			return fmt.Errorf("symbolize processor tls: %w", err)
		}
		tr.TLSClientConfig = tlsCfg
	}
	token, err := p.cfg.token()
	if err != nil {
		return fmt.Errorf("symbolize processor: %w", err)
	}
	p.hc = &http.Client{Transport: tr}
	// Every Symbolize call is a client span carrying W3C trace context (traceparent), so the
	// symbolizer's spans join the processor's trace. The Collector's own metrics cover calls.
	traces, err := otelconnect.NewInterceptor(otelconnect.WithTracerProvider(p.tp), otelconnect.WithoutMetrics(),
		otelconnect.WithPropagator(propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{})))
	if err != nil {
		return fmt.Errorf("symbolize processor tracing: %w", err)
	}
	withTraces := connect.WithInterceptors(traces)
	client := symbolize.NewClient(p.hc, p.cfg.Endpoint, token, withTraces)
	if a := p.cfg.Affinity; a.Enabled {
		u, err := url.Parse(p.cfg.Endpoint)
		if err != nil {
			return fmt.Errorf("symbolize processor endpoint: %w", err)
		}
		if tr.TLSClientConfig != nil && tr.TLSClientConfig.ServerName == "" {
			// Replicas are dialed by address; their certificate names the Service.
			tr.TLSClientConfig.ServerName = u.Hostname()
		}
		p.router, err = affinity.New(affinity.Config{
			Scheme: u.Scheme, DNS: a.DNS, Static: a.Endpoints, Refresh: a.RefreshInterval,
			AttemptTimeout: a.AttemptTimeout, BalanceFactor: a.BalanceFactor, EjectFor: a.EjectFor, GiveUpAfter: a.GiveUpAfter,
			NewClient: func(base string) symbolizerv1connect.SymbolizerServiceClient {
				return symbolize.NewClient(p.hc, base, token, withTraces)
			},
			Logger: slog.New(zapslog.NewHandler(p.logger.Core())),
		})
		if err != nil {
			return fmt.Errorf("symbolize processor: %w", err)
		}
		p.router.Start()
		client = p.router
	}
	cacheEntries := p.cfg.CacheEntries
	if cacheEntries == 0 {
		cacheEntries = -1 // symbolize.Config reads 0 as "default"; here 0 turns the cache off
	}
	p.sym = symbolize.New(symbolize.Config{
		Client:         client,
		Timeout:        p.cfg.Deadline,
		CallTimeout:    p.cfg.Timeout,
		BatchAddresses: p.cfg.BatchAddresses,
		Concurrency:    p.cfg.Concurrency,
		CacheEntries:   cacheEntries,
		FrameTypes:     p.cfg.frameTypes(),
		OnCall:         p.tel.onCall,
		Logger:         slog.New(zapslog.NewHandler(p.logger.Core())),
	})
	if h := p.cfg.Hold; h.Enabled {
		p.hold = symbolize.NewHolder(p.sym, symbolize.HoldConfig{For: h.Timeout, MaxBytes: h.MaxBytes, Retry: h.RetryInterval,
			Logger: slog.New(zapslog.NewHandler(p.logger.Core()))}, consumererror.IsPermanent)
	}
	return nil
}

func (p *symbolizeProcessor) shutdown(ctx context.Context) error {
	var err error
	if p.hold != nil {
		// What is held goes on as it is.
		err = p.hold.Close(ctx)
	}
	if p.router != nil {
		p.router.Close()
	}
	if p.hc != nil {
		p.hc.CloseIdleConnections()
	}
	return err
}

// emitHeld hands on profiles the hold kept, when their frames were answered or the hold
// ended.
func (p *symbolizeProcessor) emitHeld(ctx context.Context, pd pprofile.Profiles, res symbolize.HoldResult) error {
	if err := p.next.ConsumeProfiles(ctx, pd); err != nil {
		if consumererror.IsPermanent(err) {
			p.tel.recordHeld(ctx, res)
		}
		return err
	}
	p.tel.recordHeld(ctx, res)
	return nil
}

// processProfiles symbolizes pd within the deadline and hands it on; it never fails and never
// drops: what cannot be symbolized goes on as it came.
func (p *symbolizeProcessor) processProfiles(ctx context.Context, pd pprofile.Profiles) (pprofile.Profiles, error) {
	// The Collector's OTLP/gRPC receiver leaves resource and scope attributes that arrived as
	// string-table references unresolved, and compaction renumbers the string table they
	// point into. pdata does not check indices and panics on a bad one: a batch that fails
	// either check is not read further, only passed on.
	if err := otlpprofiles.ResolveReferences(pd); err != nil {
		p.tel.invalid.Add(ctx, 1)
		p.logger.Warn("profiles passed on unsymbolized: invalid attribute reference", zap.Error(err))
		return pd, nil
	}
	if err := otlpprofiles.Validate(pd); err != nil {
		p.tel.invalid.Add(ctx, 1)
		p.logger.Warn("profiles passed on unsymbolized: invalid index", zap.Error(err))
		return pd, nil
	}
	ctx, span := p.tracer.Start(ctx, "symbolize", trace.WithAttributes(attribute.Int("profsym.profiles", pd.ProfileCount())))
	var rep symbolize.Report
	held := false
	if p.hold != nil {
		var err error
		if pd, rep, held, err = p.hold.Process(ctx, pd, p.emitHeld); err != nil {
			// Full: the batch is refused whole, for its sender to retry (UNAVAILABLE).
			p.tel.holdRefused.Add(ctx, 1)
			span.End()
			return pd, err
		}
	} else {
		rep = p.sym.Process(ctx, pd)
	}
	p.tel.record(ctx, rep, held)
	unresolved := 0
	for _, n := range rep.Unresolved {
		unresolved += n
	}
	span.SetAttributes(attribute.Int("profsym.locations.seen", rep.Seen), attribute.Int("profsym.locations.symbolized", rep.Symbolized),
		attribute.Int("profsym.locations.unresolved", unresolved), attribute.Int("profsym.cache_hits", rep.CacheHits),
		attribute.Int("profsym.symbolizer_calls", rep.Calls))
	span.End()
	if n := rep.Unresolved[symbolize.ReasonDeadline] + rep.Unresolved[symbolize.ReasonSymbolizerError]; n > 0 && !held {
		p.logger.Debug("frames passed on unsymbolized", zap.Int("frames", n), zap.Any("reasons", rep.Unresolved))
	}
	if held && pd.ResourceProfiles().Len() == 0 {
		return pd, processorhelper.ErrSkipProcessingData // every profile is held
	}
	return pd, nil
}
