//! Tools from functions: an async function (or closure) over typed arguments becomes a
//! [`Tool`], with its JSON schema derived from the argument type.

use std::fmt;
use std::future::Future;
use std::marker::PhantomData;
use std::pin::Pin;

use async_trait::async_trait;
use schemars::JsonSchema;
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;

use super::tool::{EffectPolicy, Tool, ToolContext, ToolError, ToolRef, ToolSpec};

/// A tool made from an async function: `f(ctx, args) -> Result<T, E>`.
///
/// * The arguments are any `A: Deserialize + JsonSchema`: the model sees the JSON schema
///   derived from `A` (doc comments of its fields become their descriptions), and the model's
///   arguments are decoded into `A` before `f` runs. Arguments that do not decode are a failed
///   call naming the offending field (`invalid arguments: city: invalid type: …`); `f` does
///   not run.
/// * `ctx` is the call's [`ToolContext`]: `ctx.idempotency_key` is the same on every
///   re-execution of this call, for an idempotent tool to pass to the system it acts on.
/// * The output `T: Serialize` is the call's result; an error `E: Display` is a failed call
///   with the error's text (written with `{:#}`, so an `anyhow::Error` shows its chain). The
///   agent's tool failure policy decides what a failed call does to the run.
/// * The effect policy is chosen by the constructor: [`FnTool::idempotent`] or
///   [`FnTool::at_most_once`] (see [`EffectPolicy`]).
///
/// ```
/// use afk_core::runner::{FnTool, ToolContext, ToolError};
/// use schemars::JsonSchema;
/// use serde::Deserialize;
///
/// /// A city to look up.
/// #[derive(Deserialize, JsonSchema)]
/// struct City {
///     /// The city's name, in English.
///     city: String,
/// }
///
/// async fn weather(_ctx: ToolContext, args: City) -> Result<String, ToolError> {
///     Ok(format!("{}: 12 °C, cloudy", args.city))
/// }
///
/// let tool = FnTool::idempotent("weather", "Today's weather in a city", weather);
/// assert_eq!(tool.spec().parameters["properties"]["city"]["type"], "string");
/// ```
pub struct FnTool<A, F> {
    spec: ToolSpec,
    policy: EffectPolicy,
    f: F,
    args: PhantomData<fn(A)>,
}

/// What [`FnTool`] asks of its function: `Fn(ToolContext, A) -> impl Future<Output =
/// Result<T, E>>` with `T: Serialize` and `E: Display`, shareable across tasks. Implemented
/// for every such function and closure; there is nothing to implement by hand.
pub trait ToolFn<A>: Send + Sync + 'static {
    /// Run the function and turn its outcome into a tool result.
    fn invoke(
        &self,
        ctx: ToolContext,
        args: A,
    ) -> Pin<Box<dyn Future<Output = Result<Value, ToolError>> + Send + 'static>>;
}

impl<A, F, Fut, T, E> ToolFn<A> for F
where
    F: Fn(ToolContext, A) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<T, E>> + Send + 'static,
    T: Serialize,
    E: fmt::Display,
{
    fn invoke(
        &self,
        ctx: ToolContext,
        args: A,
    ) -> Pin<Box<dyn Future<Output = Result<Value, ToolError>> + Send + 'static>> {
        let fut = self(ctx, args);
        Box::pin(async move {
            let out = fut.await.map_err(|e| ToolError::new(format!("{e:#}")))?;
            serde_json::to_value(out)
                .map_err(|e| ToolError::new(format!("the output is not JSON: {e}")))
        })
    }
}

impl<A, F> FnTool<A, F>
where
    A: DeserializeOwned + JsonSchema + Send + 'static,
    F: ToolFn<A>,
{
    /// A tool that may run again after a crash, with the same `ctx.idempotency_key`
    /// ([`EffectPolicy::Idempotent`]): reads, and writes the other side deduplicates by key.
    pub fn idempotent(name: impl Into<String>, description: impl Into<String>, f: F) -> ToolRef {
        Self::with_policy(name, description, EffectPolicy::Idempotent, f)
    }

    /// A tool whose effect must not happen twice ([`EffectPolicy::AtMostOnce`]): when a crash
    /// leaves it unknown whether it ran, resume stops with
    /// [`ErrorKind::EffectUncertain`](crate::ErrorKind::EffectUncertain) instead of running it
    /// again.
    pub fn at_most_once(name: impl Into<String>, description: impl Into<String>, f: F) -> ToolRef {
        Self::with_policy(name, description, EffectPolicy::AtMostOnce, f)
    }

    /// A tool with the policy given as a value.
    pub fn with_policy(
        name: impl Into<String>,
        description: impl Into<String>,
        policy: EffectPolicy,
        f: F,
    ) -> ToolRef {
        std::sync::Arc::new(FnTool {
            spec: ToolSpec {
                name: name.into(),
                description: description.into(),
                parameters: schema_of::<A>(),
            },
            policy,
            f,
            args: PhantomData,
        })
    }
}

impl<A, F> fmt::Debug for FnTool<A, F> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FnTool")
            .field("name", &self.spec.name)
            .field("policy", &self.policy)
            .field("args", &std::any::type_name::<A>())
            .finish_non_exhaustive()
    }
}

#[async_trait]
impl<A, F> Tool for FnTool<A, F>
where
    A: DeserializeOwned + Send + 'static,
    F: ToolFn<A>,
{
    fn spec(&self) -> ToolSpec {
        self.spec.clone()
    }

    fn effect_policy(&self) -> EffectPolicy {
        self.policy
    }

    async fn call(&self, ctx: ToolContext, args: Value) -> Result<Value, ToolError> {
        let args: A = serde_path_to_error::deserialize(args)
            .map_err(|e| ToolError::new(format!("invalid arguments: {e}")))?;
        self.f.invoke(ctx, args).await
    }
}

/// The JSON schema the model sees for arguments of type `A`: JSON Schema 2020-12 with every
/// subschema inlined (several providers and local servers do not follow `$ref`), without
/// `$schema` and `title` (noise for the model).
pub fn schema_of<A: JsonSchema>() -> Value {
    let mut settings = schemars::generate::SchemaSettings::draft2020_12();
    settings.inline_subschemas = true;
    let mut schema = settings
        .into_generator()
        .into_root_schema_for::<A>()
        .to_value();
    if let Some(object) = schema.as_object_mut() {
        object.remove("$schema");
        object.remove("title");
    }
    schema
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use std::collections::BTreeMap;
    use std::sync::{Arc, Mutex};

    use serde::Deserialize;
    use serde_json::json;

    use super::*;

    /// Where to send money.
    #[derive(Debug, Deserialize, JsonSchema)]
    struct Payment {
        /// Whole cents.
        amount: u64,
        to: Account,
        memo: Option<String>,
    }

    #[derive(Debug, Deserialize, JsonSchema)]
    struct Account {
        iban: String,
    }

    fn ctx(key: &str) -> ToolContext {
        ToolContext {
            run_id: "r".into(),
            thread_id: "t".into(),
            tool_call_id: "c1".into(),
            step: 1,
            idempotency_key: key.into(),
        }
    }

    #[derive(Debug)]
    struct Declined;
    impl fmt::Display for Declined {
        fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("card declined")
        }
    }

    /// A payment function that records the keys it was called with.
    fn pay(seen: Arc<Mutex<Vec<String>>>) -> ToolRef {
        FnTool::at_most_once("pay", "Send money", move |ctx: ToolContext, p: Payment| {
            let seen = seen.clone();
            async move {
                seen.lock().unwrap().push(ctx.idempotency_key);
                if p.amount > 1000 {
                    return Err(Declined);
                }
                Ok(json!({"paid": p.amount, "to": p.to.iban, "memo": p.memo}))
            }
        })
    }

    #[test]
    fn the_schema_is_derived_from_the_argument_type() {
        let spec = pay(Arc::default()).spec();
        assert_eq!(spec.name, "pay");
        assert_eq!(spec.description, "Send money");
        let p = &spec.parameters;
        assert_eq!(p["type"], "object");
        assert_eq!(p["description"], "Where to send money.");
        assert_eq!(p["properties"]["amount"]["description"], "Whole cents.");
        assert_eq!(p["properties"]["amount"]["type"], "integer");
        // The nested type is inlined, not a `$ref` into `$defs`.
        assert_eq!(
            p["properties"]["to"]["properties"]["iban"]["type"],
            "string"
        );
        assert!(
            p.get("$defs").is_none() && p.get("$schema").is_none(),
            "{p}"
        );
        assert_eq!(p["required"], json!(["amount", "to"]));
    }

    #[test]
    fn the_policy_is_the_one_the_constructor_names() {
        let idem = FnTool::idempotent("r", "", |_: ToolContext, _: Account| async {
            Ok::<_, ToolError>(())
        });
        assert_eq!(idem.effect_policy(), EffectPolicy::Idempotent);
        assert_eq!(
            pay(Arc::default()).effect_policy(),
            EffectPolicy::AtMostOnce
        );
    }

    #[tokio::test]
    async fn the_function_gets_typed_arguments_and_the_idempotency_key() {
        let seen = Arc::new(Mutex::new(Vec::new()));
        let args = json!({"amount": 250, "to": {"iban": "NO93"}});
        let out = pay(seen.clone()).call(ctx("r:1:c1"), args).await.unwrap();
        assert_eq!(out, json!({"paid": 250, "to": "NO93", "memo": null}));
        assert_eq!(*seen.lock().unwrap(), ["r:1:c1"]);
    }

    #[tokio::test]
    async fn arguments_that_do_not_decode_fail_the_call_without_running_it() {
        let seen = Arc::new(Mutex::new(Vec::new()));
        let args = json!({"amount": 5, "to": {"iban": 7}});
        let err = pay(seen.clone()).call(ctx("k"), args).await.unwrap_err();
        assert!(
            err.message
                .starts_with("invalid arguments: to.iban: invalid type"),
            "{err}"
        );
        let err = pay(seen.clone())
            .call(ctx("k"), json!("nope"))
            .await
            .unwrap_err();
        assert!(err.message.starts_with("invalid arguments"), "{err}");
        assert!(seen.lock().unwrap().is_empty(), "the function ran");
    }

    #[tokio::test]
    async fn the_function_error_is_the_tool_error() {
        let args = json!({"amount": 5000, "to": {"iban": "NO93"}});
        let err = pay(Arc::default()).call(ctx("k"), args).await.unwrap_err();
        assert_eq!(err, ToolError::new("card declined"));
    }

    #[tokio::test]
    async fn an_output_that_is_not_json_fails_the_call() {
        let tool = FnTool::idempotent("m", "", |_: ToolContext, _: Account| async {
            // A map with non-string keys has no JSON form.
            Ok::<_, ToolError>(BTreeMap::from([((1, 2), "x")]))
        });
        let err = tool.call(ctx("k"), json!({"iban": "x"})).await.unwrap_err();
        assert!(err.message.starts_with("the output is not JSON"), "{err}");
    }
}
