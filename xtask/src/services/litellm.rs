//! An OpenAI-compatible server: LiteLLM's proxy (PyPI), installed on demand into a virtualenv
//! under the cache directory, serving one model, `afk-weather`, from a scripted provider
//! (`mock_llm.py`: a call of the tool `weather`, then a final answer). It needs no model
//! weights and no network; it speaks the Chat Completions wire format the way LiteLLM's proxy
//! does for any real provider (tool calls, usage, errors), behind a master key.

use std::fs::{self, File};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use anyhow::{Context, Result, bail};

use crate::system;

/// The LiteLLM release the scripted provider was written against.
const LITELLM: &str = "litellm[proxy]==1.108.7";

/// The model the proxy serves.
pub const MODEL: &str = "afk-weather";

/// The proxy's master key: clients send it as their API key (`OPENAI_API_KEY`).
pub const KEY: &str = "sk-afk-test-4c1f0e9a7b2d";

/// The model's final answer (after the tool's result).
pub const FINAL: &str = "Cloudy in Oslo, 12 degrees.";

/// The scripted provider (Python), written beside the proxy's configuration.
const HANDLER: &str = include_str!("mock_llm.py");

const CONFIG: &str = "model_list:
  - model_name: afk-weather
    litellm_params:
      model: afk-mock/weather
litellm_settings:
  custom_provider_map:
    - provider: afk-mock
      custom_handler: mock_llm.handler
";

fn venv() -> PathBuf {
    system::cache_dir().join("litellm-venv")
}

fn litellm_bin() -> PathBuf {
    venv().join("bin").join("litellm")
}

/// True when the virtualenv is missing and `python3` cannot create one.
pub fn needs_python_venv() -> bool {
    super::needs_python_venv(&litellm_bin())
}

/// A running proxy.
#[derive(Debug, Clone)]
pub struct Llm {
    /// `http://127.0.0.1:<port>/v1`, for `OPENAI_BASE_URL`.
    pub base_url: String,
    /// While this file exists, the next request with a tool result is held for a minute (the
    /// file is removed and `<hold>.held` created when that happens).
    pub hold: PathBuf,
    /// One line per request: `call` (answered with a tool call) or `final`.
    pub log: PathBuf,
}

impl Llm {
    /// The marker the proxy creates when it starts holding a request.
    pub fn held(&self) -> PathBuf {
        let mut name = self.hold.as_os_str().to_owned();
        name.push(".held");
        PathBuf::from(name)
    }

    /// The requests answered so far, in order (`call` or `final`).
    pub fn requests(&self) -> Vec<String> {
        fs::read_to_string(&self.log)
            .unwrap_or_default()
            .lines()
            .map(str::to_owned)
            .collect()
    }
}

/// Installs LiteLLM if needed and starts its proxy on a free port in its own process group;
/// writes `<dir>/litellm.pid` and waits (at most 3 min: its first start compiles Python) until
/// it answers. Everything it needs lives in `dir`.
pub fn start(dir: &Path) -> Result<Llm> {
    super::pip_install(&venv(), &litellm_bin(), LITELLM)?;
    let [port] = system::free_ports(1)?[..] else {
        bail!("no free port")
    };
    fs::write(dir.join("mock_llm.py"), HANDLER)?;
    fs::write(dir.join("litellm.yaml"), CONFIG)?;
    let llm = Llm {
        base_url: format!("http://127.0.0.1:{port}/v1"),
        hold: dir.join("llm-hold"),
        log: dir.join("llm-requests.log"),
    };
    let log_path = dir.join("litellm.log");
    let log = File::create(&log_path)?;
    let child = Command::new(litellm_bin())
        .arg("--config")
        .arg(dir.join("litellm.yaml"))
        .args(["--host", "127.0.0.1", "--port", &port.to_string()])
        .current_dir(dir)
        .env("PYTHONPATH", dir)
        .env("LITELLM_MASTER_KEY", KEY)
        // Its price table from the installed package, not fetched from GitHub.
        .env("LITELLM_LOCAL_MODEL_COST_MAP", "True")
        .env("AFK_MOCK_LLM_FINAL", FINAL)
        .env("AFK_MOCK_LLM_HOLD", &llm.hold)
        .env("AFK_MOCK_LLM_LOG", &llm.log)
        .stdin(Stdio::null())
        .stdout(log.try_clone()?)
        .stderr(log)
        .process_group(0)
        .spawn()
        .context("cannot start LiteLLM's proxy")?;
    fs::write(dir.join("litellm.pid"), child.id().to_string())?;
    system::wait_until(
        &format!("LiteLLM on port {port}"),
        Duration::from_secs(180),
        || super::http_status(port, "/health/liveliness") == Some(200),
    )
    .with_context(|| system::log_tail(&log_path, 20))?;
    Ok(llm)
}
