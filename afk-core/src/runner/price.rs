//! What model answers cost: a price table the application sets, read by model clients to fill
//! in [`LlmResponse::cost_usd`](crate::schema::LlmResponse::cost_usd).

use std::collections::BTreeMap;

use crate::schema::Usage;

/// The price of one model, in USD per million tokens.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ModelPrice {
    /// USD per million prompt (input) tokens.
    pub input_per_million: f64,
    /// USD per million completion (output) tokens.
    pub output_per_million: f64,
}

impl ModelPrice {
    /// A price in USD per million input and output tokens, as providers publish them.
    pub fn per_million(input: f64, output: f64) -> Self {
        ModelPrice {
            input_per_million: input,
            output_per_million: output,
        }
    }

    /// The cost of `usage` at this price.
    pub fn cost(&self, usage: &Usage) -> f64 {
        (usage.input_tokens as f64 * self.input_per_million
            + usage.output_tokens as f64 * self.output_per_million)
            / 1_000_000.0
    }
}

/// Prices by model name. Empty by default: prices change and differ by contract, so the
/// application states the ones it pays (AFK ships no prices either).
///
/// ```
/// use afk_core::runner::{ModelPrice, PriceTable};
/// use afk_core::schema::Usage;
///
/// let prices = PriceTable::new().with("gpt-4o-mini", ModelPrice::per_million(0.15, 0.60));
/// let usage = Usage { input_tokens: 2_000, output_tokens: 500, ..Usage::default() };
/// let cost = prices.cost("gpt-4o-mini", None, &usage).unwrap();
/// assert!((cost - 0.0006).abs() < 1e-12);
/// assert_eq!(prices.cost("another-model", None, &usage), None);
/// ```
#[derive(Debug, Clone, Default, PartialEq)]
pub struct PriceTable {
    prices: BTreeMap<String, ModelPrice>,
}

impl PriceTable {
    /// An empty table: no answer is priced.
    pub fn new() -> Self {
        PriceTable::default()
    }

    /// Add (or replace) the price of `model`.
    #[must_use]
    pub fn with(mut self, model: impl Into<String>, price: ModelPrice) -> Self {
        self.prices.insert(model.into(), price);
        self
    }

    /// The price of `model`, if the table has one (names match exactly).
    pub fn price(&self, model: &str) -> Option<ModelPrice> {
        self.prices.get(model).copied()
    }

    /// The cost of an answer: priced by the model that was asked for (`requested`), or, when
    /// the table has no price for that name, by the name the provider answered with
    /// (`answered`, often a dated version such as `gpt-4o-2024-08-06`). `None` when neither
    /// has a price.
    pub fn cost(&self, requested: &str, answered: Option<&str>, usage: &Usage) -> Option<f64> {
        self.price(requested)
            .or_else(|| answered.and_then(|m| self.price(m)))
            .map(|p| p.cost(usage))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn usage(input: u64, output: u64) -> Usage {
        Usage {
            input_tokens: input,
            output_tokens: output,
            total_tokens: input + output,
            ..Usage::default()
        }
    }

    #[test]
    fn an_answer_is_priced_by_the_requested_model_then_by_the_answering_one() {
        let t = PriceTable::new()
            .with("m", ModelPrice::per_million(1.0, 2.0))
            .with("m-2024", ModelPrice::per_million(10.0, 20.0));
        assert_eq!(t.cost("m", Some("m-2024"), &usage(1_000_000, 0)), Some(1.0));
        assert_eq!(
            t.cost("x", Some("m-2024"), &usage(0, 1_000_000)),
            Some(20.0)
        );
        assert_eq!(t.cost("x", Some("y"), &usage(1, 1)), None);
        assert_eq!(t.cost("x", None, &usage(1, 1)), None);
    }
}
