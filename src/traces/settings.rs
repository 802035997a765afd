//! `[telemetry]` read into what the exporter needs: where to send, with which headers, which
//! runs to trace. Checked when the configuration loads, so a typo stops `serve` with the key's
//! name instead of silently exporting nothing.

use std::collections::HashMap;
use std::time::Duration;

use opentelemetry_sdk::trace::Sampler;

use crate::config::{ConfigError, TelemetrySettings};

impl TelemetrySettings {
    /// Where spans are sent, or `None`: export is off (no endpoint, or `disabled`).
    pub fn traces_url(&self) -> Option<String> {
        if self.disabled {
            return None;
        }
        let url = match (self.traces_endpoint.trim(), self.endpoint.trim()) {
            ("", "") => return None,
            ("", base) => format!("{}/v1/traces", base.trim_end_matches('/')),
            (traces, _) => traces.to_string(),
        };
        Some(url)
    }

    /// The export headers: `name=value` pairs separated by commas, values percent-decoded.
    pub fn header_map(&self) -> Result<HashMap<String, String>, ConfigError> {
        let mut headers = HashMap::new();
        for pair in self.headers.expose().split(',').map(str::trim).filter(|pair| !pair.is_empty()) {
            let Some((name, value)) = pair.split_once('=') else {
                // Never the pair itself: it is likely a key.
                return invalid("telemetry.headers", "holds an entry without `=` (name=value,name2=value2)");
            };
            let value = url::form_urlencoded::parse(format!("v={}", value.trim()).as_bytes())
                .next()
                .map(|(_, value)| value.into_owned())
                .unwrap_or_default();
            let name = name.trim().to_ascii_lowercase();
            if http::HeaderName::from_bytes(name.as_bytes()).is_err() || http::HeaderValue::from_str(&value).is_err() {
                return invalid("telemetry.headers", "holds a header an HTTP request cannot carry");
            }
            headers.insert(name, value);
        }
        Ok(headers)
    }

    /// The sampler that decides, at a run's start, whether it is traced.
    pub fn sampler(&self) -> Result<Sampler, ConfigError> {
        let ratio = || {
            if (0.0..=1.0).contains(&self.sampler_arg) {
                Ok(Sampler::TraceIdRatioBased(self.sampler_arg))
            } else {
                invalid("telemetry.sampler_arg", &format!("= {} is not a ratio from 0 to 1", self.sampler_arg))
            }
        };
        Ok(match self.sampler.trim() {
            "always_on" => Sampler::AlwaysOn,
            "always_off" => Sampler::AlwaysOff,
            "traceidratio" => ratio()?,
            "parentbased_always_on" => Sampler::ParentBased(Box::new(Sampler::AlwaysOn)),
            "parentbased_always_off" => Sampler::ParentBased(Box::new(Sampler::AlwaysOff)),
            "parentbased_traceidratio" => Sampler::ParentBased(Box::new(ratio()?)),
            other => {
                let shown = crate::excerpt::excerpt(other, 60);
                return invalid(
                    "telemetry.sampler",
                    &format!(
                        "= {shown:?} is not a sampler flexrun knows (always_on, always_off, traceidratio, \
                         parentbased_always_on, parentbased_always_off, parentbased_traceidratio)"
                    ),
                );
            }
        })
    }

    pub fn export_timeout(&self) -> Duration {
        Duration::from_millis(self.export_timeout_millis)
    }

    pub fn schedule_delay(&self) -> Duration {
        Duration::from_millis(self.schedule_delay_millis)
    }

    /// Everything above, and bounds that are not zero, checked at load.
    pub(crate) fn check(&self) -> Result<(), ConfigError> {
        self.header_map()?;
        self.sampler()?;
        if let Some(url) = self.traces_url() {
            match url::Url::parse(&url) {
                Ok(parsed) if matches!(parsed.scheme(), "http" | "https") && parsed.has_host() => {}
                _ => {
                    let shown = crate::excerpt::excerpt(&url, 100);
                    return invalid("telemetry.endpoint", &format!("gives {shown:?}, which is not an http(s) URL"));
                }
            }
        }
        for (key, value) in
            [("telemetry.queue_size", self.queue_size), ("telemetry.max_export_batch_size", self.max_export_batch_size)]
        {
            if value == 0 {
                return invalid(key, "must be at least 1");
            }
        }
        if self.export_timeout_millis == 0 {
            return invalid("telemetry.export_timeout_millis", "must be at least 1");
        }
        Ok(())
    }
}

fn invalid<T>(key: &'static str, problem: &str) -> Result<T, ConfigError> {
    Err(ConfigError::Invalid { key, problem: problem.to_string() })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use crate::config::Settings;

    fn load(vars: &[(&str, &str)]) -> Result<Settings, crate::config::ConfigError> {
        let vars: Vec<(String, String)> = vars.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        Settings::load_from(|name| vars.iter().find(|(k, _)| k == name).map(|(_, v)| v.clone()))
    }

    #[test]
    fn export_is_off_without_an_endpoint_or_when_disabled() {
        assert_eq!(load(&[]).unwrap().telemetry.traces_url(), None);
        let on = load(&[("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:4318/")]).unwrap();
        assert_eq!(on.telemetry.traces_url().as_deref(), Some("http://127.0.0.1:4318/v1/traces"));
        let own = load(&[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:4318"),
            ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "http://127.0.0.1:9/traces"),
        ])
        .unwrap();
        assert_eq!(own.telemetry.traces_url().as_deref(), Some("http://127.0.0.1:9/traces"));
        let off = load(&[("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:4318"), ("OTEL_SDK_DISABLED", "true")]);
        assert_eq!(off.unwrap().telemetry.traces_url(), None);
    }

    #[test]
    fn headers_are_read_as_the_standard_writes_them_and_never_shown() {
        let s = load(&[("OTEL_EXPORTER_OTLP_HEADERS", "x-api-key=s%3Dcret, x-team = blue")]).unwrap();
        let headers = s.telemetry.header_map().unwrap();
        assert_eq!(headers["x-api-key"], "s=cret");
        assert_eq!(headers["x-team"], "blue");
        assert!(!format!("{:?}", s.telemetry).contains("cret"));
        let error = load(&[("OTEL_EXPORTER_OTLP_HEADERS", "just-a-secret-key")]).unwrap_err().to_string();
        assert!(error.contains("telemetry.headers") && !error.contains("just-a-secret-key"), "{error}");
    }

    #[test]
    fn a_sampler_flexrun_does_not_know_stops_the_load_naming_the_key() {
        let error = load(&[("OTEL_TRACES_SAMPLER", "sometimes")]).unwrap_err().to_string();
        assert!(error.contains("telemetry.sampler") && error.contains("sometimes"), "{error}");
        let error =
            load(&[("OTEL_TRACES_SAMPLER", "traceidratio"), ("OTEL_TRACES_SAMPLER_ARG", "2")]).unwrap_err().to_string();
        assert!(error.contains("telemetry.sampler_arg"), "{error}");
        let error = load(&[("OTEL_EXPORTER_OTLP_ENDPOINT", "collector:4318")]).unwrap_err().to_string();
        assert!(error.contains("telemetry.endpoint"), "{error}");
    }
}
