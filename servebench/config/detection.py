"""Detection settings: plain data, importable by the campaign spec without numpy or scipy."""

from pydantic import BaseModel, ConfigDict, Field


class DetectionSettings(BaseModel):
    """A campaign's `detection:` section; the defaults are the ones the synthetic tests assert."""

    model_config = ConfigDict(extra="forbid")

    baseline_nights: int = Field(7, ge=1, description="K: tonight is tested against this many good nights.")
    alpha: float = Field(0.005, gt=0, lt=1, description="U-test level, for the gate and each change point.")
    min_effect: float = Field(0.05, ge=0, description="Relative change below which nothing is reported.")
    noise_z: float = Field(3.5, ge=0, description="A gate alarm also needs this many standard errors of "
                                                   "tonight's median (from the within-night scatter).")
    confirm_nights: int = Field(2, ge=1, description="Nights a change point needs behind it to be confirmed.")
    history_nights: int = Field(90, ge=2, description="Nights of history the analysis looks at.")
    penalty: float = Field(3.0, gt=0, description="PELT penalty, in within-night variance x log(n).")
