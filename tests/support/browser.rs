//! A real headless Chromium driven over WebDriver (Debian's `chromium` and `chromium-driver`),
//! for the console's tests. `scripts/test` installs both when they are missing; without them a
//! test fails and says so.

use std::net::TcpListener;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use fantoccini::{Client, ClientBuilder, Locator};
use serde_json::json;

/// A chromedriver process and a browser session in it.
pub struct Browser {
    pub client: Client,
    driver: Child,
}

const DRIVER: &str = "/usr/bin/chromedriver";
const CHROMIUM: &str = "/usr/bin/chromium";

/// The colour scheme the browser asks pages for (`prefers-color-scheme`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scheme {
    Light,
    Dark,
}

impl Scheme {
    pub fn name(self) -> &'static str {
        match self {
            Self::Light => "light",
            Self::Dark => "dark",
        }
    }
}

impl Browser {
    /// Starts chromedriver on a free loopback port and opens a headless Chromium `width` pixels
    /// wide, in the light scheme.
    pub async fn start(width: u32) -> Self {
        Self::start_in(width, Scheme::Light).await
    }

    /// [`Browser::start`] in the colour scheme `scheme`.
    pub async fn start_in(width: u32, scheme: Scheme) -> Self {
        for (path, package) in [(DRIVER, "chromium-driver"), (CHROMIUM, "chromium")] {
            assert!(
                std::path::Path::new(path).exists(),
                "{path} is missing: run the tests with scripts/test, which installs Debian's {package}, \
                 or `apt-get install chromium chromium-driver`"
            );
        }
        let port = TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        let driver = Command::new(DRIVER)
            .arg(format!("--port={port}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start chromedriver");
        let mut capabilities = serde_json::Map::new();
        capabilities.insert(
            "goog:chromeOptions".into(),
            json!({"binary": CHROMIUM, "args": ["--headless=new", "--no-sandbox", "--disable-gpu",
                   "--disable-dev-shm-usage", format!("--window-size={width},900"),
                   // Blink's preferred scheme: 0 is dark, 1 light.
                   format!("--blink-settings=preferredColorScheme={}", u8::from(scheme == Scheme::Light))]}),
        );
        capabilities.insert("goog:loggingPrefs".into(), json!({"browser": "ALL"}));
        let url = format!("http://127.0.0.1:{port}");
        let mut last_error = None;
        for _ in 0..100 {
            match ClientBuilder::native().capabilities(capabilities.clone()).connect(&url).await {
                Ok(client) => return Self { client, driver },
                Err(error) => last_error = Some(error),
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        panic!("chromedriver did not start a session: {last_error:?}");
    }

    /// The text of the first element `css` selects, once there is one (waiting up to 10 s). The
    /// run page swaps its live parts as frames arrive: an element swapped out between finding it
    /// and reading it is found again.
    pub async fn text(&self, css: &str) -> String {
        for _ in 0..3 {
            let element = self.client.wait().at_most(Duration::from_secs(10)).for_element(Locator::Css(css)).await;
            if let Ok(text) = element.unwrap_or_else(|e| panic!("no element {css}: {e}")).text().await {
                return text;
            }
        }
        panic!("{css} kept being replaced while it was read");
    }

    /// Clicks the first element `css` selects (waiting up to 10 s for one). The run page swaps its
    /// live parts as frames arrive: an element swapped out before the click is found again.
    pub async fn click(&self, css: &str) {
        for _ in 0..3 {
            let element = self.client.wait().at_most(Duration::from_secs(10)).for_element(Locator::Css(css)).await;
            if element.unwrap_or_else(|e| panic!("no element {css}: {e}")).click().await.is_ok() {
                return;
            }
        }
        panic!("{css} kept being replaced while it was clicked");
    }

    /// Waits up to 10 s until the first element `css` selects has text containing `wanted`.
    pub async fn wait_for_text(&self, css: &str, wanted: &str) {
        for _ in 0..100 {
            if let Ok(element) = self.client.find(Locator::Css(css)).await
                && element.text().await.is_ok_and(|text| text.contains(wanted))
            {
                return;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        panic!("{css} never showed {wanted:?}; it shows {:?}", self.text(css).await);
    }

    /// Clicks the first enabled button labelled `label` (inside `scope`, a CSS selector).
    pub async fn click_button(&self, scope: &str, label: &str) {
        let css = format!("{scope} button");
        for _ in 0..100 {
            for button in self.client.find_all(Locator::Css(&css)).await.unwrap() {
                if button.text().await.is_ok_and(|text| text.trim() == label)
                    && button.is_enabled().await.unwrap_or(false)
                {
                    return button.click().await.unwrap();
                }
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        panic!("no enabled button {label:?} in {scope}");
    }

    /// Types `text` into the field `css` selects, replacing what it held.
    pub async fn fill(&self, css: &str, text: &str) {
        let field = self.client.wait().at_most(Duration::from_secs(10)).for_element(Locator::Css(css)).await;
        let field = field.unwrap_or_else(|e| panic!("no field {css}: {e}"));
        field.clear().await.unwrap();
        field.send_keys(text).await.unwrap();
    }

    /// Sets a large field's value at once (typing a whole envelope key by key is slow) and tells
    /// the page, as typing would.
    pub async fn set_value(&self, css: &str, text: &str) {
        let script = "const f = document.querySelector(arguments[0]); f.value = arguments[1]; \
                      f.dispatchEvent(new Event('input', {bubbles: true})); \
                      f.dispatchEvent(new Event('change', {bubbles: true}));";
        self.client.execute(script, vec![json!(css), json!(text)]).await.unwrap();
    }

    /// Waits up to 10 s until `script` (a function body) returns `true`.
    pub async fn wait_until(&self, what: &str, script: &str) {
        for _ in 0..100 {
            if self.client.execute(script, vec![]).await.is_ok_and(|v| v == json!(true)) {
                return;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        panic!("never true: {what}");
    }

    /// Severe messages the pages logged to the browser console (errors, failed requests).
    pub async fn console_errors(&self) -> Vec<String> {
        let logs = self.client.issue_cmd(LogCommand).await.unwrap_or_default();
        logs.as_array()
            .map(|entries| {
                entries
                    .iter()
                    .filter(|entry| entry["level"] == "SEVERE")
                    .map(|entry| entry["message"].as_str().unwrap_or_default().to_string())
                    .collect()
            })
            .unwrap_or_default()
    }

    /// Saves a screenshot of the page as `<name>.png` in `FLEXRUN_SCREENSHOTS`, when that is set
    /// (how the pictures in docs/console.md are made).
    pub async fn screenshot(&self, name: &str) {
        let Some(dir) = std::env::var_os("FLEXRUN_SCREENSHOTS") else { return };
        let png = self.client.screenshot().await.unwrap();
        std::fs::write(std::path::Path::new(&dir).join(format!("{name}.png")), png).unwrap();
    }

    pub async fn close(mut self) {
        let _ = self.client.clone().close().await;
        let _ = self.driver.kill();
        let _ = self.driver.wait();
    }
}

/// chromedriver's `POST /session/{id}/se/log {type: "browser"}`: the browser console's messages
/// since the last call.
#[derive(Debug)]
struct LogCommand;

impl fantoccini::wd::WebDriverCompatibleCommand for LogCommand {
    fn endpoint(&self, base_url: &url::Url, session_id: Option<&str>) -> Result<url::Url, url::ParseError> {
        base_url.join(&format!("session/{}/se/log", session_id.unwrap_or_default()))
    }

    fn method_and_body(&self, _request_url: &url::Url) -> (reqwest::Method, Option<String>) {
        (reqwest::Method::POST, Some(json!({"type": "browser"}).to_string()))
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        let _ = self.driver.kill();
        let _ = self.driver.wait();
    }
}
